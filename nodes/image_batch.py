"""Picture batches: Batch Images (several pictures -> one batch) and Image From Batch (a slice of one).

Lives here: `batch_images`, `MAX_BATCH_INPUTS`, `NODES`. Imports `nodes.spec`, `nodes.kinds`, `nodes.types`,
`nodes.context` and `pipelines.diffusion.resize` (inside `batch_images`).

Batch Images takes up to `MAX_BATCH_INPUTS` optional pictures (`image0`, `image1`, ...: ComfyUI's
BatchImagesNode names them `images.image0`, ...) and does what ComfyUI's `batch_images` does: every picture
takes the size of the first, cut to its aspect ratio around the middle and resized bilinearly, RGB gains an
opaque alpha channel when another picture has one, and they are joined in input order. Image From Batch is
ComfyUI's ImageFromBatch: `length` pictures from `batch_index` (both clamped to the batch). The node is
written as a `NodeSpec` because its inputs are a numbered list, not a fixed set of fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import INT
from nodes.spec import Input, NodeSpec, Output
from nodes.types import IMAGE

if TYPE_CHECKING:
    import torch

# ComfyUI's BatchImagesNode allows 50; its templates wire up to 14.
MAX_BATCH_INPUTS = 16


def batch_images(images: list[torch.Tensor]) -> torch.Tensor:
    """(B_i, H_i, W_i, C_i) pictures -> one (sum B_i, H_0, W_0, C) batch, as ComfyUI's `batch_images`."""
    import torch

    from pipelines.diffusion.resize import resize_image

    if not images:
        raise ValueError("no picture is wired: connect at least image0")
    channels = max(image.shape[-1] for image in images)
    padded = [
        torch.nn.functional.pad(image, (0, 1), value=1.0) if image.shape[-1] < channels else image
        for image in images
    ]
    height, width = padded[0].shape[1:3]
    same = [
        image
        if image.shape[1:3] == (height, width)
        else resize_image(image, height, width, "bilinear", crop="center")
        for image in padded
    ]
    return torch.cat(same, dim=0)


def _run_batch_images(ctx: NodeContext, **pictures: Any) -> dict[str, Any]:
    wired = [pictures[f"image{i}"] for i in range(MAX_BATCH_INPUTS) if pictures.get(f"image{i}") is not None]
    return {"image": batch_images(wired)}


BATCH_IMAGES = NodeSpec(
    type="BatchImages",
    title="Batch Images",
    category="image",
    run=_run_batch_images,
    inputs=[
        Input(f"image{i}", IMAGE, help="a picture (resized to image0's size)", optional=True)
        for i in range(MAX_BATCH_INPUTS)
    ],
    outputs=[Output("image", IMAGE)],
    description="Several pictures as one batch, each at the first one's size (ComfyUI's Batch Images).",
    tags=("BatchImagesNode",),  # ComfyUI's class name: the palette finds this node by it
)


@node_type("ImageFromBatch", title="Image From Batch", category="image", outputs=[Output("image", IMAGE)])
class ImageFromBatch(Node):
    image: Any = wire(IMAGE)
    batch_index: int = param(
        INT, 0, min=0, max=4095, help="the first picture taken (0-based)", comfy="batch_index"
    )
    length: int = param(INT, 1, min=1, max=4096, help="how many pictures", comfy="length")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        count = self.image.shape[0]
        start = min(self.batch_index, count - 1)
        return {"image": self.image[start : start + min(self.length, count - start)].clone()}


NODES: tuple[NodeSpec, ...] = (BATCH_IMAGES, ImageFromBatch.spec)
