"""Cheap latent previews, no VAE: a model's own fitted patch decoder, else a per-family RGB projection.

Lives here: `PREVIEW_FILE`, `PreviewDecoder`, `load_preview_decoder`, `model_folder`, `latent_preview`.
May import: torch, PIL, safetensors, pipelines.diffusion.families.

The per-family factors are ComfyUI's latent_formats (fitted on the real SD/SDXL VAEs). A model with its
own VAE (the built-in shapes-sd) ships `latent_preview.safetensors`, fitted by `training/preview_fit.py`: two
small convolutions from latents to pixel patches (a linear map cannot follow that VAE; measured). Samplers pass the x0
prediction (what the picture will become), not the noisy latents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

from pipelines.diffusion.families import Family

PREVIEW_FILE = "latent_preview.safetensors"


@dataclass(frozen=True)
class PreviewDecoder:
    """conv3x3 (C -> hidden), SiLU, conv1x1 (hidden -> 3 * scale * scale), pixel shuffle."""

    w1: torch.Tensor  # (hidden, C, 3, 3)
    b1: torch.Tensor
    w2: torch.Tensor  # (3 * scale * scale, hidden, 1, 1)
    b2: torch.Tensor
    scale: int

    @property
    def channels(self) -> int:
        return self.w1.shape[1]

    def __call__(self, latents: torch.Tensor) -> torch.Tensor:
        """(N, C, h, w) -> (N, 3, h * scale, w * scale), roughly in [-1, 1]."""
        hidden = F.silu(F.conv2d(latents, self.w1, self.b1, padding=1))
        return F.pixel_shuffle(F.conv2d(hidden, self.w2, self.b2), self.scale)


def load_preview_decoder(model_folder: Path | None) -> PreviewDecoder | None:
    """The decoder shipped in a model folder, or None (then the family's factors are used)."""
    if model_folder is None or not (model_folder / PREVIEW_FILE).is_file():
        return None
    from safetensors.torch import load_file

    t = {k: v.float() for k, v in load_file(str(model_folder / PREVIEW_FILE)).items()}
    if not {"w1", "b1", "w2", "b2", "scale"} <= t.keys():
        return None  # another layout (an older fit): fall back to the family's factors
    return PreviewDecoder(w1=t["w1"], b1=t["b1"], w2=t["w2"], b2=t["b2"], scale=int(t["scale"]))


def model_folder(weight_files: tuple[Path, ...]) -> Path | None:
    """The diffusers folder a component's weights live in (…/unet/x.safetensors -> …), if any."""
    if weight_files and (weight_files[0].parent.parent / "model_index.json").is_file():
        return weight_files[0].parent.parent
    return None


def latent_preview(
    latents: torch.Tensor,
    family: Family,
    *,
    decoder: PreviewDecoder | None = None,
    max_side: int = 256,
) -> Image.Image:
    """First image of a (B, C, h, w) latent batch as a small RGB picture."""
    x = latents[0].detach().float().cpu()  # (C, h, w)
    if decoder is not None and decoder.channels == x.shape[0]:
        with torch.no_grad():
            rgb = decoder(x[None])[0].permute(1, 2, 0)
    elif len(family.latent_rgb_factors) != x.shape[0]:
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
