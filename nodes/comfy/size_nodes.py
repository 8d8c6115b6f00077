"""Sizes the way ComfyUI's newer workflows pick them: scale a picture to a pixel count, and the width and
height of an aspect ratio at a pixel count.

Lives here: the node types `ImageScaleToTotalPixels`, `ImageScaleToSide`, the pure functions
`total_pixels_size`, `side_size` and `ratio_size` (also used by the importer to resolve a ResolutionSelector to constants), and `NODES`.
Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context` and
`pipelines.diffusion.resize`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import IMAGE
from pipelines.diffusion.resize import UPSCALE_METHODS, resize_image

if TYPE_CHECKING:
    import torch

MEGAPIXEL = 1024 * 1024  # ComfyUI's megapixel: 2^20 pixels


def _to_step(value: float, step: int) -> int:
    return max(step, round(value / step) * step)


def total_pixels_size(height: int, width: int, megapixels: float, step: int = 1) -> tuple[int, int]:
    """(height, width) of the same aspect ratio with about `megapixels` * 2^20 pixels, each side rounded
    to a multiple of `step` (ComfyUI's ImageScaleToTotalPixels)."""
    scale = math.sqrt(megapixels * MEGAPIXEL / (height * width))
    return _to_step(height * scale, step), _to_step(width * scale, step)


def ratio_size(aspect_ratio: str, megapixels: float, multiple: int) -> tuple[int, int] | None:
    """(width, height) for ComfyUI's ResolutionSelector choice ("16:9 (Widescreen)"), or None when the
    text names no W:H ratio."""
    found = re.match(r"\s*(\d+(?:\.\d+)?)\s*:\s*(\d+(?:\.\d+)?)", aspect_ratio)
    if found is None or float(found[1]) <= 0 or float(found[2]) <= 0:
        return None
    w, h = float(found[1]), float(found[2])
    height, width = total_pixels_size(round(h * 1000), round(w * 1000), megapixels, max(1, multiple))
    return width, height


@node_type(
    "ImageScaleToTotalPixels",
    title="Scale Image to Pixels",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="Scale to about this many megapixels (2^20 pixels each), keeping the aspect ratio.",
    tags=("ImageScaleToTotalPixels", "megapixels"),
)
class ImageScaleToTotalPixels(Node):
    image: torch.Tensor = wire(IMAGE)
    method: str = param(CHOICE, "nearest-exact", choices=UPSCALE_METHODS, comfy="upscale_method")
    megapixels: float = param(FLOAT, 1.0, min=0.01, max=16.0, step=0.01, comfy="megapixels")
    resolution_steps: int = param(
        INT, 1, min=1, max=256, help="each side a multiple of this", comfy="resolution_steps"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        h, w = total_pixels_size(
            self.image.shape[1], self.image.shape[2], self.megapixels, self.resolution_steps
        )
        return {"image": resize_image(self.image, h, w, self.method)}


def side_size(height: int, width: int, side: str, size: int) -> tuple[int, int]:
    """(height, width) with the longer (or shorter) side at `size`, the other in proportion, rounded as
    ComfyUI's ResizeImageMaskNode "scale longer/shorter dimension" rounds (comfy_extras
    nodes_post_processing.py `scale_longer_dimension`); a square gets `size` both ways."""
    if height == width:
        return size, size
    tall = height > width
    if tall == (side == "longer"):  # the height is the side that takes `size`
        return size, max(1, round(width / height * size))
    return max(1, round(height / width * size)), size


@node_type(
    "ImageScaleToSide",
    title="Scale Image to Side",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="Scale so the longer (or shorter) side is this many pixels, keeping the aspect ratio.",
    tags=("ResizeImageMaskNode", "longer side", "shorter side"),
)
class ImageScaleToSide(Node):
    image: torch.Tensor = wire(IMAGE)
    side: str = param(CHOICE, "longer", choices=("longer", "shorter"))
    size: int = param(INT, 1024, min=1, max=16384)
    method: str = param(CHOICE, "lanczos", choices=UPSCALE_METHODS)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        h, w = side_size(self.image.shape[1], self.image.shape[2], self.side, self.size)
        return {"image": resize_image(self.image, h, w, self.method)}


NODES: tuple[NodeSpec, ...] = (ImageScaleToTotalPixels.spec, ImageScaleToSide.spec)
