"""ComfyUI's Canny edge detector (its `Canny` node: kornia's canny with the defaults, vendored in
comfy_extras/nodes_canny.py), written out for Nodeloom.

Lives here: `canny_edges`. May import: torch.

The steps, each as ComfyUI takes it: luminance 0.299 R + 0.587 G + 0.114 B; a 5x5 Gaussian blur of sigma 1
(reflect padding); Sobel gradients, unnormalized (replicate padding); magnitude sqrt(gx^2 + gy^2 + 1e-6) and the
gradient angle rounded to the nearest 45 degrees; non-maximum suppression against the two neighbours along that
angle (zero padding: a border pixel's outer neighbour counts as 0), kept only where strictly larger than both;
weak edges above `low`, strong above `high`; hysteresis keeps a weak pixel once it is 8-connected, through other
weak pixels, to a strong one. The result is white edges on black in all three channels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_EPS = 1e-6  # kornia's regularizer inside the square root
# (dy, dx) of the neighbour each rounded direction k = angle / 45 (mod 8) points at; y grows downwards.
_STEPS = ((0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1), (-1, 0), (-1, 1))


def _blur(gray: torch.Tensor) -> torch.Tensor:
    """(B, 1, H, W) -> the same, blurred by ComfyUI's 5x5 sigma-1 Gaussian."""
    x = torch.linspace(-2.0, 2.0, 5)
    pdf = torch.exp(-0.5 * x**2)
    k1 = (pdf / pdf.sum()).to(gray.dtype)
    kernel = (k1[:, None] * k1[None, :])[None, None]  # (1, 1, 5, 5)
    return F.conv2d(F.pad(gray, (2, 2, 2, 2), mode="reflect"), kernel)


def _sobel(blurred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    sx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], dtype=blurred.dtype)
    kernel = torch.stack([sx, sx.T])[:, None]  # (2, 1, 3, 3): d/dx, d/dy
    grad = F.conv2d(F.pad(blurred, (1, 1, 1, 1), mode="replicate"), kernel)
    return grad[:, 0:1], grad[:, 1:2]


def _neighbour(values: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """values[y + dy, x + dx] for each pixel, 0 outside the picture."""
    padded = F.pad(values, (1, 1, 1, 1))
    h, w = values.shape[-2:]
    return padded[..., 1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]


def canny_edges(image: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """IMAGE (B, H, W, C) in [0, 1] -> IMAGE of 0/1 edges, as ComfyUI's Canny node gives it."""
    if not 0.0 <= low <= high:
        raise ValueError(f"Canny thresholds need 0 <= low <= high, got low={low}, high={high}")
    rgb = image[..., :3].movedim(-1, 1).float()  # (B, 3, H, W)
    w_r, w_g, w_b = torch.tensor([0.299, 0.587, 0.114], dtype=rgb.dtype).unbind()
    gray = w_r * rgb[:, 0:1] + w_g * rgb[:, 1:2] + w_b * rgb[:, 2:3]
    gx, gy = _sobel(_blur(gray))
    magnitude = torch.sqrt(gx * gx + gy * gy + _EPS)
    degrees = 180.0 * torch.atan2(gy, gx) / math.pi  # ComfyUI's conversion, so ties round the same way
    direction = (torch.round(degrees / 45) % 8).long()
    ahead = torch.zeros_like(magnitude)
    behind = torch.zeros_like(magnitude)
    for k, (dy, dx) in enumerate(_STEPS):
        here = direction == k
        ahead = torch.where(here, _neighbour(magnitude, dy, dx), ahead)
        behind = torch.where(here, _neighbour(magnitude, -dy, -dx), behind)
    magnitude = magnitude * ((magnitude - ahead > 0) & (magnitude - behind > 0))
    strong = magnitude > high
    weak = (magnitude > low) & ~strong
    while True:  # grow the strong set into touching weak pixels until it stops changing
        touching = F.max_pool2d(strong.float(), 3, stride=1, padding=1) > 0
        grown = strong | (weak & touching)
        if torch.equal(grown, strong):
            break
        strong = grown
    return strong.to(image.dtype).movedim(1, -1).repeat(1, 1, 1, 3)
