"""The noise mask of inpainting with ordinary models, on latents.

Lives here: `latent_noise_mask`. (Resizing latents: pipelines.diffusion.resize.)
May import: torch, pipelines.diffusion.values.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from pipelines.diffusion.values import Latents


def latent_noise_mask(latents: Latents, mask: torch.Tensor) -> Latents:
    """Attach a MASK (B or 1, H, W, pixels, 1 = repaint) to latents, resized to the latent grid (area mean,
    so a latent cell half inside the mask is half repainted)."""
    if mask.ndim == 2:
        mask = mask[None]
    h, w = latents.samples.shape[-2:]
    small = F.interpolate(mask[:, None].to(torch.float32), size=(h, w), mode="area")
    return dataclasses.replace(latents, noise_mask=small.clamp(0.0, 1.0))
