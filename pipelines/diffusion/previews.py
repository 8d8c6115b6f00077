"""Cheap latent previews: a fixed linear projection from latent channels to RGB, no VAE.

Lives here: `latent_preview`. May import: torch, PIL, pipelines.diffusion.families.

The projection factors are per family (fitted on the real VAEs, ComfyUI's latent_formats). For random
demo models the picture is meaningless but cheap; for real models it shows the composition forming.
"""

from __future__ import annotations

import torch
from PIL import Image

from pipelines.diffusion.families import Family


def latent_preview(latents: torch.Tensor, family: Family, *, max_side: int = 256) -> Image.Image:
    """First image of a (B, C, h, w) latent batch as a small RGB picture."""
    x = latents[0].detach().float().cpu()  # (C, h, w)
    if len(family.latent_rgb_factors) != x.shape[0]:
        # A family whose channel count we have no factors for: show the first three channels.
        rgb = x[:3].permute(1, 2, 0)
    else:
        factors = torch.tensor(family.latent_rgb_factors, dtype=torch.float32)  # (C, 3)
        bias = torch.tensor(family.latent_rgb_bias, dtype=torch.float32)
        rgb = torch.einsum("chw,cr->hwr", x, factors) + bias  # (h, w, 3), roughly in [-1, 1]
    rgb = ((rgb + 1.0) / 2.0).clamp(0.0, 1.0)
    image = Image.fromarray((rgb * 255).round().to(torch.uint8).numpy())
    scale = max(1, max_side // max(image.size))
    return image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
