"""Video VAE decode in pieces, chosen when the memory manager predicts that a whole decode won't fit: chunks of
latent frames through the causal cache (temporal), or spatial tiles.

Lives here: `VideoTilePlan`, `plan_video_decode`, `video_plan_for`, `decode_video_planned`,
`temporal_working`, `spatial_working`. May import: torch,
diffusers, memory, pipelines.diffusion.values / video_vae / tiled_vae / tiling.

The Wan VAE already decodes one latent frame at a time with a causal cache, so its activations grow with the
picture, not the frames (`video_vae._PER_PIXEL_PER_BASE`); what grows with the frames is the decoded video,
which a whole decode keeps on the device until the end. The plans, cheapest first:
- `full`: diffusers' `decode` (activations + the whole (3, T, H, W) output on the device).
- `temporal`: the same per-frame calls with the same cache, written out here, moving every `chunk` latent
  frames' output to the CPU: activations + one chunk's output. The same ops in the same order, so the frames
  equal a full decode's.
- `spatial`: diffusers' `tiled_decode` (each tile through all frames with its own cache, neighbours blended
  over a quarter of a tile): activations at the tile's size + about 3x the output (the overlapping tiles wait
  beside the blended result). Tiles see less context than the whole picture, so the frames differ from a full
  decode near the seams.
The choice compares the formulas with what the budget can give the VAE once everything evictable is gone
(`tiled_vae._available_for`, the image tiling's rule); `tiling="on"` forces a spatial pass, `"off"` a full one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.tiling import TILING_CHOICES
from pipelines.diffusion.values import Latents, VaeRef

# Latent frames decoded before their output goes to the CPU in a temporal pass.
TEMPORAL_CHUNK = 4
# diffusers' Wan default: 256 px tiles every 192 px (a quarter overlaps); below 64 px a tile is mostly seam.
_STRIDE_OF_TILE = 0.75
MIN_TILE_PX = 64
_HELD_OUTPUTS = 3  # spatial: the overlapping decoded tiles (about 1.8x the output at 3/4 stride) + the result


@dataclass(frozen=True)
class VideoTilePlan:
    """How a video decode will run and why; the node puts it in the report."""

    mode: str  # "full" | "temporal" | "spatial"
    chunk: int  # latent frames per temporal chunk (0 unless temporal)
    tile_px: int  # spatial tile side in pixels (0 unless spatial)
    full_bytes: int  # the working-memory formula of a whole decode
    working_bytes: int  # the formula of the pass chosen
    available: int
    reason: str


def _sizes(ref: VaeRef, latents: Latents) -> tuple[int, int, int, int]:
    """(output frames, height, width, base channels)."""
    _, _, frames, h, w = latents.samples.shape
    scale = latents.vae_scale_factor
    out_frames = (frames - 1) * int(ref.config.get("scale_factor_temporal", 4)) + 1
    base = int(ref.config.get("decoder_base_dim") or ref.config.get("base_dim", 96))
    return out_frames, h * scale, w * scale, base


def _bytes(ref: VaeRef, elements: int) -> int:
    return elements * torch.finfo(ref.dtype).bits // 8


def temporal_working(ref: VaeRef, latents: Latents, chunk: int) -> int:
    from pipelines.diffusion.video_vae import _PER_PIXEL_PER_BASE

    _, height, width, base = _sizes(ref, latents)
    pixel_frames = chunk * int(ref.config.get("scale_factor_temporal", 4))
    return _bytes(ref, _PER_PIXEL_PER_BASE * base * height * width + 3 * pixel_frames * height * width)


def spatial_working(ref: VaeRef, latents: Latents, tile_px: int) -> int:
    from pipelines.diffusion.video_vae import _PER_PIXEL_PER_BASE

    out_frames, height, width, base = _sizes(ref, latents)
    tile_h, tile_w = min(tile_px, height), min(tile_px, width)
    held = _HELD_OUTPUTS * 3 * out_frames * height * width
    return _bytes(ref, _PER_PIXEL_PER_BASE * base * tile_h * tile_w + held)


def plan_video_decode(
    ref: VaeRef, latents: Latents, available: int, *, tiling: str = "auto", tile_px: int = 0
) -> VideoTilePlan:
    """The cheapest pass whose formula fits `available` bytes (the smallest tile when none does)."""
    from pipelines.diffusion.video_vae import video_vae_working

    if tiling not in TILING_CHOICES:
        raise ValueError(f"field 'tiling': one of {', '.join(TILING_CHOICES)}, got {tiling!r}")
    full = video_vae_working(ref, latents).formula_bytes
    if tiling == "off" or (tiling == "auto" and full <= available):
        why = "forced off" if tiling == "off" else "a whole decode fits"
        return VideoTilePlan("full", 0, 0, full, full, available, why)
    frames = latents.samples.shape[2]
    if (
        tiling == "auto"
        and frames > TEMPORAL_CHUNK
        and temporal_working(ref, latents, TEMPORAL_CHUNK) <= available
    ):
        working = temporal_working(ref, latents, TEMPORAL_CHUNK)
        why = "a whole decode would need more than the budget can give; chunks of latent frames fit"
        return VideoTilePlan("temporal", TEMPORAL_CHUNK, 0, full, working, available, why)
    _, height, width, _ = _sizes(ref, latents)
    step = 4 * latents.vae_scale_factor  # whole latents, and a stride (3/4 of a tile) of whole latents too
    if tile_px <= 0:
        tile_px = max(height, width)
        while tile_px > MIN_TILE_PX and spatial_working(ref, latents, tile_px) > available:
            tile_px = max(MIN_TILE_PX, tile_px // 2)
    tile_px = max(step, tile_px // step * step)
    why = "forced on" if tiling == "on" else "a whole decode and frame chunks would need more than the budget"
    return VideoTilePlan("spatial", 0, tile_px, full, spatial_working(ref, latents, tile_px), available, why)


def video_plan_for(
    mm: MemoryManager, ref: VaeRef, latents: Latents, *, tiling: str = "auto", tile_px: int = 0
) -> VideoTilePlan:
    """`plan_video_decode` against what the manager's budget can give this VAE now."""
    from pipelines.diffusion.tiled_vae import _available_for

    return plan_video_decode(ref, latents, _available_for(mm, ref), tiling=tiling, tile_px=tile_px)


def _decode_temporal(vae: torch.nn.Module, z: torch.Tensor, chunk: int) -> torch.Tensor:
    """Adapted from diffusers' `AutoencoderKLWan._decode` (the same per-frame calls and cache), with every
    `chunk` latent frames' output clamped and moved to the CPU instead of kept on the device."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    frames = z.shape[2]
    vae.clear_cache()
    x = vae.post_quant_conv(z)
    parts, pending = [], []
    for i in range(frames):
        vae._conv_idx = [0]
        out = vae.decoder(
            x[:, :, i : i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx, first_chunk=i == 0
        )
        pending.append(out)
        if len(pending) == chunk or i == frames - 1:
            piece = torch.cat(pending, 2)
            if vae.config.patch_size is not None:
                piece = unpatchify(piece, patch_size=vae.config.patch_size)
            parts.append(torch.clamp(piece, min=-1.0, max=1.0).cpu())
            pending = []
    vae.clear_cache()
    return torch.cat(parts, 2)


def _decode_spatial(vae: torch.nn.Module, z: torch.Tensor, tile_px: int) -> torch.Tensor:
    """diffusers' `tiled_decode` at our tile size; the module's own settings are put back after the call (it
    is the manager's and outlives this node)."""
    names = (
        "tile_sample_min_height",
        "tile_sample_min_width",
        "tile_sample_stride_height",
        "tile_sample_stride_width",
    )
    old = {name: getattr(vae, name) for name in names}
    stride = int(tile_px * _STRIDE_OF_TILE)
    vae.tile_sample_min_height = vae.tile_sample_min_width = tile_px
    vae.tile_sample_stride_height = vae.tile_sample_stride_width = stride
    try:
        return vae.tiled_decode(z, return_dict=False)[0]
    finally:
        for name, value in old.items():
            setattr(vae, name, value)


@torch.no_grad()
def decode_video_planned(
    mm: MemoryManager, ref: VaeRef, latents: Latents, plan: VideoTilePlan
) -> torch.Tensor:
    """Video latents -> frames (T, H, W, 3) float32 in [0, 1], CPU, decoded as `plan` says."""
    from pipelines.diffusion.video_vae import check_video_latents, unscale_video_latents

    check_video_latents(latents)
    _, _, frames, height, width = latents.samples.shape
    working = Working(plan.working_bytes, f"{plan.mode}:1x{frames}x{height}x{width}")
    with mm.use(ref.handle, working=working) as vae:
        z = unscale_video_latents(ref, latents.samples.to(device=mm.device, dtype=ref.dtype))
        if plan.mode == "temporal":
            video = _decode_temporal(vae, z, plan.chunk)
        elif plan.mode == "spatial":
            video = _decode_spatial(vae, z, plan.tile_px)
        else:
            video = vae.decode(z, return_dict=False)[0]  # (1, 3, T, H, W) in [-1, 1]
    # after the use: `app plan` stops at it, without diffusers
    from diffusers.video_processor import VideoProcessor

    processor = VideoProcessor(vae_scale_factor=ref.scale_factor)
    frames_out = processor.postprocess_video(video.cpu(), output_type="pt")[0]  # (T, 3, H, W) in [0, 1]
    return frames_out.permute(0, 2, 3, 1).to(dtype=torch.float32, device="cpu")
