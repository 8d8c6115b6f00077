"""Tiled VAE decode and encode, chosen when the memory manager predicts that a full pass won't fit.

Lives here: `TilePlan`, `plan_decode`, `plan_encode`, `decode_tiled`, `encode_tiled`.
May import: torch, diffusers, memory, pipelines.diffusion.vae, pipelines.diffusion.values.

The tiling itself is diffusers' (`AutoencoderKL.tiled_decode` / `tiled_encode`, the code behind
`enable_tiling()`), so a tiled decode here equals diffusers' tiled decode with the same tile size. What we
add is the decision: the activation estimate of a full pass (`vae_working_bytes`) is compared with what the
budget can give the VAE once everything evictable is gone, and when it does not fit, the largest tile that
does is picked. A user can force it either way (`tiling="on" | "off"`) and set the tile size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memory import MemoryManager
from pipelines.diffusion.tiling import TILING_CHOICES
from pipelines.diffusion.vae import _scale, _unscale, vae_working_bytes
from pipelines.diffusion.values import Latents, VaeRef

# diffusers' default overlap between neighbouring tiles (a quarter of a tile), blended linearly.
DEFAULT_OVERLAP = 0.25
# Below this a tile is mostly seam; diffusers' own default tile for SD VAEs is 512 px.
MIN_TILE_PX = 64


@dataclass(frozen=True)
class TilePlan:
    """How a VAE pass will run and why; the node puts it in the report."""

    tiled: bool
    tile_px: int  # tile side in pixels (0 when not tiled)
    overlap: float
    full_bytes: int  # predicted activations of a full pass
    tile_bytes: (
        int  # predicted working memory of the tiled pass: one tile + the tiles held (0 when not tiled)
    )
    available: int  # bytes the budget can give the VAE's activations
    reason: str


def _available_for(mm: MemoryManager, ref: VaeRef) -> int:
    """Budget left for this VAE's activations once every other unlocked model has been evicted.

    Under `none` nothing is evicted, so only what is free now counts."""
    ledger = mm.ledger
    weights = ref.handle.weight_bytes or 0
    if not mm.policy.may_evict:
        return ledger.device_free() - (0 if ref.handle.device_bytes else weights)
    pinned = sum(h.device_bytes for h in ledger.handles.values() if h.locks and h is not ref.handle)
    return ledger.models_budget() - pinned - sum(ledger.working.values()) - weights


def _tile_bytes(ref: VaeRef, tile_px: int, batch: int, kind: str) -> int:
    return vae_working_bytes(ref, tile_px, tile_px, batch, kind)


def _plan(
    mm: MemoryManager, ref: VaeRef, height: int, width: int, batch: int, kind: str, tiling: str, tile_px: int
) -> TilePlan:
    if tiling not in TILING_CHOICES:
        raise ValueError(f"tiling must be one of {', '.join(TILING_CHOICES)}, got {tiling!r}")
    full = vae_working_bytes(ref, height, width, batch, kind)
    available = _available_for(mm, ref)
    step = ref.scale_factor * 8  # tiles stay whole latents and multiples of 8 latents
    if tiling == "off" or (tiling == "auto" and full <= available):
        why = "forced off" if tiling == "off" else "a full pass fits"
        return TilePlan(False, 0, DEFAULT_OVERLAP, full, 0, available, why)
    # The decoded tiles wait next to each other before blending: about 3x the output, whatever the tile.
    held = 3 * batch * 3 * height * width * ref.dtype.itemsize
    if tile_px <= 0:
        # The largest tile (a multiple of `step`) whose activations fit, never below MIN_TILE_PX.
        tile_px = max(height, width)
        while tile_px > MIN_TILE_PX and _tile_bytes(ref, tile_px, batch, kind) + held > available:
            tile_px = max(MIN_TILE_PX, (tile_px // 2) // step * step or step)
    tile_px = max(step, tile_px // step * step)
    why = "forced on" if tiling == "on" else "a full pass would need more than the budget can give"
    return TilePlan(
        True, tile_px, DEFAULT_OVERLAP, full, _tile_bytes(ref, tile_px, batch, kind), available, why
    )


def plan_decode(
    mm: MemoryManager, ref: VaeRef, latents: Latents, tiling: str = "auto", tile_px: int = 0
) -> TilePlan:
    height, width = latents.pixel_size
    return _plan(mm, ref, height, width, latents.samples.shape[0], "vae_decode", tiling, tile_px)


def plan_encode(
    mm: MemoryManager, ref: VaeRef, image: torch.Tensor, tiling: str = "auto", tile_px: int = 0
) -> TilePlan:
    batch, height, width = image.shape[0], image.shape[1], image.shape[2]
    return _plan(mm, ref, height, width, batch, "vae_encode", tiling, tile_px)


def _set_tiles(vae: torch.nn.Module, ref: VaeRef, plan: TilePlan) -> dict[str, object]:
    """Point diffusers' tiling attributes at our plan; returns the old values to restore after the call
    (the module is the manager's and outlives this node)."""
    old = {
        k: getattr(vae, k) for k in ("tile_sample_min_size", "tile_latent_min_size", "tile_overlap_factor")
    }
    vae.tile_sample_min_size = plan.tile_px
    vae.tile_latent_min_size = plan.tile_px // ref.scale_factor
    vae.tile_overlap_factor = plan.overlap
    return old


@torch.no_grad()
def decode_tiled(mm: MemoryManager, ref: VaeRef, latents: Latents, plan: TilePlan) -> torch.Tensor:
    """Latents -> IMAGE (B, H, W, C) float32 in [0, 1], CPU, decoded tile by tile as `plan` says."""
    samples = latents.samples.to(device=mm.device, dtype=ref.dtype)
    with mm.use(ref.handle, working_bytes=plan.tile_bytes) as vae:
        old = _set_tiles(vae, ref, plan)
        try:
            image = vae.tiled_decode(_unscale(ref, samples, vae), return_dict=False)[0]
        finally:
            for k, v in old.items():
                setattr(vae, k, v)
    from diffusers.image_processor import (
        VaeImageProcessor,
    )  # here: `app plan` imports this module, not diffusers

    processor = VaeImageProcessor(vae_scale_factor=ref.scale_factor)
    image = processor.postprocess(image, output_type="pt")  # (B, C, H, W) in [0, 1]
    return image.permute(0, 2, 3, 1).to(dtype=torch.float32, device="cpu")


@torch.no_grad()
def encode_tiled(mm: MemoryManager, ref: VaeRef, image: torch.Tensor, plan: TilePlan) -> Latents:
    """IMAGE (B, H, W, C) -> scaled latents, encoded tile by tile (the distribution's mode)."""
    from diffusers.image_processor import VaeImageProcessor

    processor = VaeImageProcessor(vae_scale_factor=ref.scale_factor)
    pixels = processor.preprocess(image.permute(0, 3, 1, 2)).to(device=mm.device, dtype=ref.dtype)
    with mm.use(ref.handle, working_bytes=plan.tile_bytes) as vae:
        old = _set_tiles(vae, ref, plan)
        try:
            latents = _scale(ref, vae.tiled_encode(pixels).latent_dist.mode(), vae)
        finally:
            for k, v in old.items():
                setattr(vae, k, v)
    return Latents(samples=latents.cpu(), vae_scale_factor=ref.scale_factor, source="encoded")
