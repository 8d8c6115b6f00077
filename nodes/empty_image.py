"""ComfyUI's EmptyImage as a node type: a batch of pictures of one colour (the LTX-2 text-to-video templates feed
one to a bypassed image input).

Lives here: the node type `EmptyImage` and `NODES`. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`,
`nodes.types`, `nodes.context`; torch inside the run function.
"""

from __future__ import annotations

from typing import Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param
from nodes.kinds import INT
from nodes.spec import NodeSpec, Output
from nodes.types import IMAGE


@node_type(
    "EmptyImage",
    tags=("EmptyImage", "solid colour"),
    title="Empty Image",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="A batch of pictures filled with one colour (0xRRGGBB).",
)
class EmptyImage(Node):
    width: int = param(INT, 512, min=1, max=16384, comfy="width")
    height: int = param(INT, 512, min=1, max=16384, comfy="height")
    batch: int = param(INT, 1, min=1, max=4096, comfy="batch_size")
    color: int = param(INT, 0, min=0, max=0xFFFFFF, help="0xRRGGBB as an integer (0 = black)", comfy="color")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        import torch

        rgb = [((self.color >> shift) & 0xFF) / 255.0 for shift in (16, 8, 0)]
        image = torch.tensor(rgb, dtype=torch.float32).expand(self.batch, self.height, self.width, 3)
        return {"image": image.contiguous()}


NODES: tuple[NodeSpec, ...] = (EmptyImage.spec,)
