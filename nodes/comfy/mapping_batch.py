"""ComfyUI's picture-batch nodes (BatchImagesNode, ImageFromBatch) onto ours (nodes/image_batch.py).

Lives here: `BATCH_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` and `nodes.image_batch`.

BatchImagesNode's inputs grow as pictures are wired (`images.image0`, `images.image1`, ...; older saves
`image1`, `image2`): the wired ones become our `image0`, `image1`, ... in the order of their numbers, which is
the order ComfyUI batches them in.
"""

from __future__ import annotations

import re

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, _emit, unsupported_emit
from nodes.image_batch import MAX_BATCH_INPUTS

_PICTURE = re.compile(r"^(?:images\.)?image(\d+)$")


def _batch_images(node: ComfyNode, ctx: MapContext) -> Emit:
    wired = sorted(
        (int(m[1]), value)
        for name, value in node.inputs.items()
        if (m := _PICTURE.match(name)) and isinstance(value, LinkRef)
    )
    if len(wired) > MAX_BATCH_INPUTS:
        return unsupported_emit(
            node, f"{len(wired)} pictures wired; Batch Images here takes {MAX_BATCH_INPUTS}"
        )
    emit = _emit(node, "BatchImages", {}, ("image",))
    emit.inputs.update({f"image{i}": link for i, (_, link) in enumerate(wired)})
    return emit


def _image_from_batch(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ImageFromBatch", {}, ("image",), image="image")  # batch_index, length: declared


BATCH_MAPPERS: dict[str, Mapper] = {"BatchImagesNode": _batch_images, "ImageFromBatch": _image_from_batch}
