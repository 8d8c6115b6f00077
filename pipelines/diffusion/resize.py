"""Resizing images (B, H, W, C) and latents (B, C, h, w) by the methods ComfyUI's scale nodes offer.

Lives here: `UPSCALE_METHODS`, `CROP_MODES`, `resize_image`, `resize_latent`, `scaled_size`.
May import: stdlib, torch, numpy, PIL.

`nearest-exact`, `bilinear`, `area` and `bicubic` are torch's `interpolate` modes (align_corners off);
`lanczos` is PIL's filter, per image. `center` crop first cuts the source to the target's aspect ratio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:  # torch when a resize runs: node types list UPSCALE_METHODS without it
    import torch

UPSCALE_METHODS: tuple[str, ...] = ("nearest-exact", "bilinear", "area", "bicubic", "lanczos")
CROP_MODES: tuple[str, ...] = ("disabled", "center")


def scaled_size(height: int, width: int, scale: float) -> tuple[int, int]:
    return max(1, round(height * scale)), max(1, round(width * scale))


def _center_crop(samples: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(B, C, H, W) cut to the aspect ratio of height x width, keeping the middle."""
    h, w = samples.shape[-2:]
    target, source = width / height, w / h
    if source > target:  # too wide: cut the sides
        keep = round(h * target)
        x = (w - keep) // 2
        return samples[..., :, x : x + keep]
    keep = round(w / target)
    y = (h - keep) // 2
    return samples[..., y : y + keep, :]


def _resize_nchw(samples: torch.Tensor, height: int, width: int, method: str, crop: str) -> torch.Tensor:
    if method not in UPSCALE_METHODS:
        raise ValueError(f"upscale method {method!r} is not one of {', '.join(UPSCALE_METHODS)}")
    if crop not in CROP_MODES:
        raise ValueError(f"crop {crop!r} is not one of {', '.join(CROP_MODES)}")
    import torch
    import torch.nn.functional as F

    if crop == "center":
        samples = _center_crop(samples, height, width)
    if method == "lanczos":
        out = []
        for item in samples.float():
            array = item.permute(1, 2, 0).clamp(0, 1).mul(255).round().byte().numpy()
            picture = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
            resized = (
                np.asarray(picture.resize((width, height), Image.Resampling.LANCZOS), np.float32) / 255.0
            )
            out.append(torch.from_numpy(resized.reshape(height, width, -1)).permute(2, 0, 1))
        return torch.stack(out).to(samples.dtype)
    align = {"align_corners": False} if method in ("bilinear", "bicubic") else {}
    return F.interpolate(samples, size=(height, width), mode=method, **align)


def resize_image(
    image: torch.Tensor, height: int, width: int, method: str, crop: str = "disabled"
) -> torch.Tensor:
    """(B, H, W, C) in [0, 1] -> (B, height, width, C)."""
    out = _resize_nchw(image.movedim(-1, 1), height, width, method, crop).movedim(1, -1)
    return out.clamp(0, 1)


def resize_latent(
    samples: torch.Tensor, height: int, width: int, method: str, crop: str = "disabled"
) -> torch.Tensor:
    """(B, C, h, w) -> (B, C, height, width); sizes in latent pixels."""
    if method == "lanczos":
        raise ValueError("lanczos works on images, not latents: choose another upscale method")
    return _resize_nchw(samples, height, width, method, crop)
