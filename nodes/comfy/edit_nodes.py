"""ComfyUI's picture preparation for the editing templates: scale a picture to the nearest size FLUX.1
Kontext was trained at (ComfyUI's FluxKontextImageScale, also used by the Qwen-Image-Edit templates).

Lives here: the node type `FluxKontextImageScale`, the pure function `kontext_size`, `KONTEXT_SIZES`, and
`NODES`. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context` and
`pipelines.diffusion.resize`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, wire
from nodes.spec import NodeSpec, Output
from nodes.types import IMAGE
from pipelines.diffusion.resize import resize_image

if TYPE_CHECKING:
    import torch

# (width, height) of ComfyUI's PREFERED_KONTEXT_RESOLUTIONS (comfy_extras/nodes_flux.py): about a megapixel,
# sides multiples of 16, aspect ratios from 3:7 to 7:3.
KONTEXT_SIZES: tuple[tuple[int, int], ...] = (
    (672, 1568),
    (688, 1504),
    (720, 1456),
    (752, 1392),
    (800, 1328),
    (832, 1248),
    (880, 1184),
    (944, 1104),
    (1024, 1024),
    (1104, 944),
    (1184, 880),
    (1248, 832),
    (1328, 800),
    (1392, 752),
    (1456, 720),
    (1504, 688),
    (1568, 672),
)


def kontext_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) of the Kontext size whose aspect ratio is nearest the picture's (ComfyUI's `min` over
    (ratio difference, w, h): a tie goes to the smaller width)."""
    aspect = width / height
    _, w, h = min((abs(aspect - w / h), w, h) for w, h in KONTEXT_SIZES)
    return h, w


@node_type(
    "FluxKontextImageScale",
    title="Scale Image to Kontext Size",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="Scale (Lanczos, centre crop) to the FLUX.1 Kontext training size nearest the picture's aspect "
    "ratio, about a megapixel, as ComfyUI's FluxKontextImageScale.",
    tags=("FluxKontextImageScale", "kontext", "edit"),
)
class FluxKontextImageScale(Node):
    image: torch.Tensor = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        h, w = kontext_size(self.image.shape[1], self.image.shape[2])
        return {"image": resize_image(self.image, h, w, "lanczos", "center")}


NODES: tuple[NodeSpec, ...] = (FluxKontextImageScale.spec,)
