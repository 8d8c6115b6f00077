"""LTX-2's latent upsampler (ComfyUI's LatentUpscaleModelLoader + LTXVLatentUpsampler): a small conv net that
doubles a video latent's height and width, between the two stages of the LTX-2 templates.

Lives here: `LatentUpsamplerRef`, `load_latent_upsampler`, `upsample_latent`. May import: stdlib, json, torch,
safetensors, diffusers, memory, pipelines.model_keys, pipelines.paths, pipelines.diffusion.values / ltx2_vae.

The file is one `.safetensors` whose metadata holds the model's config as JSON (`config`, what ComfyUI reads);
the network is diffusers' `LTX2LatentUpsamplerModel` (the reference `LTX2LatentUpsamplePipeline` runs it). It
works on un-normalised latents, so the latent is denormalised with the video VAE's per-channel mean and std,
upsampled and normalised again, as ComfyUI's node does.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle, Working
from pipelines.diffusion.values import Latents, VaeRef
from pipelines.model_keys import component_keys
from pipelines.paths import check_weights_format

# The reference config's names (ltx-core) -> diffusers' argument names, where they differ.
_CONFIG_NAMES = {"spatial_scale": "rational_spatial_scale", "rational_resampler": "use_rational_resampler"}


@dataclass(frozen=True)
class LatentUpsamplerRef:
    handle: ModelHandle
    config: dict[str, Any]
    path: Path


def _config(path: Path) -> dict[str, Any]:
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        raw = (f.metadata() or {}).get("config")
    if not raw:
        raise ValueError(
            f"field 'path': {path.name} has no 'config' in its metadata (not an LTX-2 latent upsampler)"
        )
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"field 'path': {path.name}: its metadata 'config' is not JSON ({exc.msg})"
        ) from None
    accepted = set(inspect.signature(LTX2LatentUpsamplerModel.__init__).parameters) - {"self"}
    renamed = {_CONFIG_NAMES.get(k, k): v for k, v in given.items()}
    return {k: v for k, v in renamed.items() if k in accepted}


def load_latent_upsampler(mm: MemoryManager, path: Path, *, allow_pickle: bool = False) -> LatentUpsamplerRef:
    """Register the upsampler lazily (built from the metadata config, weights read on first use)."""
    if not path.is_file():
        raise FileNotFoundError(f"field 'path': no latent upsampler at {path}")
    check_weights_format(path, allow_pickle=allow_pickle)
    if path.suffix.lower() != ".safetensors":
        raise ValueError(f"field 'path': {path.name}: an LTX-2 latent upsampler is a .safetensors file")
    config = _config(path)

    def build() -> torch.nn.Module:
        from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
        from safetensors.torch import load_file

        model = LTX2LatentUpsamplerModel(**config)
        missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{path.name}: not this latent upsampler's weights ({len(missing)} missing, e.g. "
                f"{missing[:2]}; {len(unexpected)} unexpected, e.g. {unexpected[:2]})"
            )
        return model.eval()

    handle = mm.register(
        ComponentSpec(
            **component_keys(path, "latent_upsampler", files=(path,)).spec_fields(),
            name=path.stem,
            kind="upscaler",
            build=build,
            files=(path,),
        )
    )
    return LatentUpsamplerRef(handle=handle, config=config, path=path)


@torch.no_grad()
def upsample_latent(
    mm: MemoryManager, upsampler: LatentUpsamplerRef, vae: VaeRef, latent: Latents
) -> Latents:
    """The video latent at twice the height and width (the sound track and frame rate unchanged)."""
    samples = latent.samples
    if samples.ndim != 5:
        raise ValueError(f"input 'latent': a video latent (1, C, F, h, w), got {tuple(samples.shape)}")
    channels = int(upsampler.config.get("in_channels", 128))
    if samples.shape[1] != channels:
        raise ValueError(f"input 'latent': {samples.shape[1]} channels, the upsampler takes {channels}")
    scaling = float(vae.config.get("scaling_factor", 1.0))
    with mm.use(vae.handle) as vae_module:  # only its per-channel statistics are read
        mean = vae_module.latents_mean.view(1, -1, 1, 1, 1).to(torch.float32).cpu()
        std = vae_module.latents_std.view(1, -1, 1, 1, 1).to(torch.float32).cpu()
    mid = int(upsampler.config.get("mid_channels", 1024))
    # the widest activations: a few mid-width maps at the output size (4x the input's pixels), float32
    working = Working(
        8 * mid * samples[0, 0].numel() * 4 * 4 + (64 << 20), f"upsample {tuple(samples.shape)}"
    )
    with mm.use(upsampler.handle, working=working) as model:
        x = samples.to(device=mm.device, dtype=torch.float32) * std.to(mm.device) / scaling + mean.to(
            mm.device
        )
        up = model(x.to(next(model.parameters()).dtype)).to(torch.float32)
        up = (up - mean.to(mm.device)) * scaling / std.to(mm.device)
    return replace(latent, samples=up.cpu(), source="upsampled", keep_mask=None)
