"""Inputs for inpainting models (9-channel UNets such as SD 1.5 / SDXL inpainting).

Lives here: `inpaint_latents`. May import: torch, memory, pipelines.diffusion.vae, pipelines.diffusion.values.

An inpainting UNet sees, next to the noisy latents, the mask at latent size and the latents of the picture
with the masked region blanked out, concatenated on the channel axis. We build both as diffusers'
`StableDiffusionInpaintPipeline` does (mask binarised at 0.5, masked pixels set to 0 in [-1, 1], i.e.
mid-grey; the mask resized to the latent grid by nearest neighbour) and hand them to the sampler on the
latent wire (`Latents.concat`), with the encoded picture as the samples, so denoise < 1 starts from it.
The masked picture's latents are the distribution's mode, like every VAE encode here (deterministic).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from memory import MemoryManager
from pipelines.diffusion.vae import encode
from pipelines.diffusion.values import Latents, VaeRef


def inpaint_latents(
    mm: MemoryManager, vae: VaeRef, image: torch.Tensor, mask: torch.Tensor, *, noise_mask: bool = True
) -> Latents:
    """IMAGE (B, H, W, C) and MASK (B or 1, H, W; 1 = repaint) -> Latents with `concat` = [mask, masked]."""
    if mask.ndim == 2:
        mask = mask[None]
    if mask.shape[-2:] != image.shape[1:3]:
        raise ValueError(
            f"the mask is {mask.shape[-1]}x{mask.shape[-2]} but the picture is {image.shape[2]}x{image.shape[1]}"
        )
    binary = (mask >= 0.5).to(image.dtype)  # diffusers' mask processor binarises at 0.5
    masked = image[..., :3] * (1 - binary[..., None]) + 0.5 * binary[..., None]  # 0.5 -> 0 in [-1, 1]
    encoded = encode(mm, vae, image[..., :3])
    masked_latents = encode(mm, vae, masked).samples
    h, w = encoded.samples.shape[-2:]
    small = F.interpolate(binary[:, None], size=(h, w))  # nearest, as the pipeline's prepare_mask_latents
    if small.shape[0] != masked_latents.shape[0]:
        small = small.expand(masked_latents.shape[0], -1, -1, -1)
    concat = torch.cat([small, masked_latents], dim=1)
    return dataclasses.replace(
        encoded,
        concat=concat,
        noise_mask=F.interpolate(mask[:, None].float(), size=(h, w), mode="area") if noise_mask else None,
    )
