"""Pixel operations on IMAGE and MASK values.

Lives here: `invert`, `canny`, `lineart`, `mask_from_alpha`, `mask_invert`, `mask_grow`, `mask_feather`.
May import: numpy, torch, cv2 (opencv-python-headless).

Value conventions (ComfyUI's): IMAGE is float32 (B, H, W, C) in [0, 1] on the CPU; MASK is float32
(B, H, W) in [0, 1], where 1 marks the region to change (repaint), 0 the region to keep.
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F


def invert(image: torch.Tensor) -> torch.Tensor:
    return 1.0 - image


def _to_uint8_gray(image: torch.Tensor) -> np.ndarray:
    """(B, H, W, C) float in [0, 1] -> (B, H, W) uint8 luminance (ITU-R 601, as OpenCV's cvtColor)."""
    rgb = (image[..., :3].clamp(0, 1) * 255.0).round().to(torch.uint8).numpy()
    return np.stack([cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2GRAY) for frame in rgb])


def _gray_to_image(gray: np.ndarray) -> torch.Tensor:
    """(B, H, W) uint8 -> IMAGE with the same value in all three channels."""
    return torch.from_numpy(gray.astype(np.float32) / 255.0)[..., None].repeat(1, 1, 1, 3)


def canny(image: torch.Tensor, low: int = 100, high: int = 200) -> torch.Tensor:
    """White edges on black (the control picture Canny ControlNets expect); thresholds on 0-255 gradients."""
    if not 0 <= low <= high:
        raise ValueError(f"Canny thresholds need 0 <= low <= high, got low={low}, high={high}")
    gray = _to_uint8_gray(image)
    return _gray_to_image(np.stack([cv2.Canny(frame, low, high) for frame in gray]))


def lineart(image: torch.Tensor, threshold: float = 0.5, dark_lines: bool = True) -> torch.Tensor:
    """Binary line art by thresholding luminance: lines white on black (dark_lines picks which side is ink)."""
    gray = torch.from_numpy(_to_uint8_gray(image).astype(np.float32) / 255.0)
    ink = gray < threshold if dark_lines else gray >= threshold
    return ink.to(torch.float32)[..., None].repeat(1, 1, 1, 3)


def mask_from_alpha(rgba: torch.Tensor) -> torch.Tensor | None:
    """A MASK from an image's alpha channel: transparent pixels are the region to repaint (as ComfyUI's
    Load Image does). None when the image has no alpha."""
    if rgba.shape[-1] < 4:
        return None
    return 1.0 - rgba[..., 3]


def mask_invert(mask: torch.Tensor) -> torch.Tensor:
    return 1.0 - mask


def mask_grow(mask: torch.Tensor, pixels: int) -> torch.Tensor:
    """Dilate (pixels > 0) or erode (pixels < 0) by a square of side 2|pixels|+1 (max-pooling)."""
    if pixels == 0:
        return mask
    size = 2 * abs(pixels) + 1
    x = mask[:, None]
    if pixels > 0:
        return F.max_pool2d(x, size, stride=1, padding=abs(pixels))[:, 0]
    return -F.max_pool2d(-x, size, stride=1, padding=abs(pixels))[:, 0]


def mask_feather(mask: torch.Tensor, radius: int) -> torch.Tensor:
    """Soften the edge with a Gaussian blur of `radius` pixels (sigma = radius / 2)."""
    if radius <= 0:
        return mask
    size = 2 * radius + 1
    sigma = radius / 2.0
    coords = torch.arange(size, dtype=torch.float32) - radius
    kernel = torch.exp(-(coords**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    x = F.pad(mask[:, None], (radius, radius, radius, radius), mode="replicate")
    x = F.conv2d(x, kernel.view(1, 1, 1, size))
    x = F.conv2d(x, kernel.view(1, 1, size, 1))
    return x[:, 0].clamp(0.0, 1.0)
