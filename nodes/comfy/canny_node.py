"""ComfyUI's Canny edge detector as a Nodeloom node (its float thresholds and its algorithm, not OpenCV's).

Lives here: the node type `CannyEdgesComfy` and `NODES`. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`,
`nodes.types`, `nodes.context`; `pipelines.image.canny_comfy` inside the run function (torch).

Our Canny Edges node is OpenCV's, with thresholds on 0-255 gradients; ComfyUI's `Canny` is kornia's (a 5x5
Gaussian, Sobel, thresholds 0.01-0.99 on the gradient of a [0, 1] picture), which draws other edges, so an
imported Canny runs this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import FLOAT
from nodes.spec import NodeSpec, Output
from nodes.types import IMAGE

if TYPE_CHECKING:
    import torch


@node_type(
    "CannyEdgesComfy",
    title="Canny Edges (ComfyUI)",
    category="image/preprocess",
    outputs=[Output("image", IMAGE)],
    description="White edges on black, as ComfyUI's Canny node draws them (thresholds on a 0-1 gradient).",
    tags=("Canny", "canny", "edges"),
)
class CannyEdgesComfy(Node):
    image: torch.Tensor = wire(IMAGE)
    low_threshold: float = param(FLOAT, 0.4, min=0.01, max=0.99, step=0.01, comfy="low_threshold")
    high_threshold: float = param(FLOAT, 0.8, min=0.01, max=0.99, step=0.01, comfy="high_threshold")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image.canny_comfy import canny_edges

        if self.low_threshold > self.high_threshold:
            raise ValueError(
                f"field 'low_threshold': {self.low_threshold} is above 'high_threshold' ({self.high_threshold})"
            )
        return {"image": canny_edges(self.image, self.low_threshold, self.high_threshold)}


NODES: tuple[NodeSpec, ...] = (CannyEdgesComfy.spec,)
