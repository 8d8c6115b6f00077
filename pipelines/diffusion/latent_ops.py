"""Operations on latents that need no model: resize, and the noise mask of inpainting with ordinary models.

Lives here: `UPSCALE_METHODS`, `upscale_latent`, `latent_noise_mask`.
May import: torch, pipelines.diffusion.values.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from pipelines.diffusion.values import Latents

UPSCALE_METHODS = ("nearest-exact", "bilinear", "bicubic", "area")


def upscale_latent(
    latents: Latents, *, scale_by: float = 2.0, width: int = 0, height: int = 0, method: str = "nearest-exact"
) -> Latents:
    """Resize latents to `width` x `height` pixels (both set) or by `scale_by` (sides rounded to whole latents).

    A resized latent is no longer what the sampler made: the next sampler should run with denoise < 1
    (hires fix), which noises it back to that fraction of the schedule first."""
    if method not in UPSCALE_METHODS:
        raise ValueError(f"method must be one of {', '.join(UPSCALE_METHODS)}, got {method!r}")
    scale = latents.vae_scale_factor
    h, w = latents.samples.shape[-2:]
    if width > 0 and height > 0:
        if width % scale or height % scale:
            raise ValueError(f"width and height must be multiples of {scale} (got {width}x{height})")
        new_h, new_w = height // scale, width // scale
    else:
        if not scale_by > 0:
            raise ValueError(f"scale_by must be positive, got {scale_by}")
        new_h, new_w = max(1, round(h * scale_by)), max(1, round(w * scale_by))
    kwargs = {"align_corners": False} if method in ("bilinear", "bicubic") else {}
    samples = F.interpolate(latents.samples, size=(new_h, new_w), mode=method, **kwargs)
    mask = latents.noise_mask
    return dataclasses.replace(latents, samples=samples, source="resized", noise_mask=mask)


def latent_noise_mask(latents: Latents, mask: torch.Tensor) -> Latents:
    """Attach a MASK (B or 1, H, W, pixels, 1 = repaint) to latents, resized to the latent grid (area mean,
    so a latent cell half inside the mask is half repainted)."""
    if mask.ndim == 2:
        mask = mask[None]
    h, w = latents.samples.shape[-2:]
    small = F.interpolate(mask[:, None].to(torch.float32), size=(h, w), mode="area")
    return dataclasses.replace(latents, noise_mask=small.clamp(0.0, 1.0))
