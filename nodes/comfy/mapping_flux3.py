"""ComfyUI's FLUX.3 template nodes: the layout-prompt helper (CreateBoundingBoxes -> Flux3LayoutPrompt, shown by a
PreviewAny) when it is off the picture's path.

Lives here: `flux3_mappers`. May import: nodes.comfy.graph, nodes.comfy.mapping.

The FLUX.3 templates carry the helper beside the generation: boxes drawn on a canvas become a layout prompt shown
as text, which the user may plug into the prompt (the templates' note says so). Where every node the chain feeds
is a PreviewAny (only a preview: nothing reaches the picture), the chain is left out with a note, so the
template runs; a layout prompt that feeds the generation stays unsupported (layout prompts are not done here).
ReferenceMultiLatent (the edit templates) is not mapped.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.mapping import MapContext, Mapper, PassThrough, unsupported_emit

_LAYOUT = ("CreateBoundingBoxes", "Flux3LayoutPrompt")
_WHY = "FLUX.3 layout prompts (boxes) are not done here"


def _consumers(graph: ComfyGraph, node_id: str) -> list[ComfyNode]:
    return [
        n
        for n in graph.nodes.values()
        if any(isinstance(v, LinkRef) and v.node == node_id for v in n.inputs.values())
    ]


def _preview_only(graph: ComfyGraph, node: ComfyNode, seen: frozenset[str] = frozenset()) -> bool:
    """Whether everything downstream of this layout node is the layout chain or a PreviewAny ending it."""
    for consumer in _consumers(graph, node.id):
        if consumer.id in seen:
            continue
        if consumer.class_type == "PreviewAny" and not _consumers(graph, consumer.id):
            continue
        if consumer.class_type not in _LAYOUT or not _preview_only(graph, consumer, seen | {node.id}):
            return False
    return True


def _layout(node: ComfyNode, ctx: MapContext) -> object:
    if _preview_only(ctx.graph, node):
        ctx.graph.note(node, f"layout-prompt helper that feeds only a preview: left out ({_WHY})")
        return PassThrough({})
    return unsupported_emit(node, _WHY)


def _preview(earlier: Mapper) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> object:
        source = node.inputs.get("source")
        origin = ctx.graph.nodes.get(source.node) if isinstance(source, LinkRef) else None
        if origin is not None and origin.class_type in _LAYOUT and _preview_only(ctx.graph, origin):
            ctx.graph.note(node, "preview of a FLUX.3 layout prompt: left out with it")
            return PassThrough({})
        return earlier(node, ctx)

    return mapper


def flux3_mappers(earlier: dict[str, Mapper]) -> dict[str, Mapper]:
    """The FLUX.3 table over `earlier`, whose PreviewAny mapper it delegates to elsewhere."""
    return {
        "CreateBoundingBoxes": _layout,
        "Flux3LayoutPrompt": _layout,
        "PreviewAny": _preview(earlier["PreviewAny"]),
    }
