"""ComfyUI's Canny node mapped onto Canny Edges (ComfyUI) (nodes/comfy/canny_node.py), its algorithm written out.

Lives here: `CANNY_MAPPERS`. Imports `nodes.comfy.graph` and `nodes.comfy.mapping` (Emit and helpers).

Not onto our OpenCV Canny Edges: ComfyUI's thresholds are on another scale and its edges differ
(pipelines/image/canny_comfy.py says how).
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode
from nodes.comfy.mapping import Emit, MapContext, Mapper, _emit


def _canny(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "CannyEdgesComfy", {}, ("image",), image="image")  # thresholds: declared


CANNY_MAPPERS: dict[str, Mapper] = {"Canny": _canny}
