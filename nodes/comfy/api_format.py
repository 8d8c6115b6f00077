"""ComfyUI's API format (the `prompt` a ComfyUI server queues): `{id: {class_type, inputs, _meta}}`.

Lives here: `is_api_format`, `parse_api`. Imports `nodes.comfy.graph`.

An input is a constant or a link `[source_id, output_index]`. Muted and bypassed nodes never reach this
format (ComfyUI's frontend leaves them out or wires around them), and primitives are already inlined.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import MAX_NODES, ComfyGraph, ComfyNode, LinkRef


class ComfyFormatError(ValueError):
    """The file is not a ComfyUI workflow in a shape we can read."""


def is_api_format(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and bool(data)
        and all(isinstance(v, dict) and isinstance(v.get("class_type"), str) for v in data.values())
    )


def _is_link(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str | int)
        and not isinstance(value[0], bool)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )


def parse_api(data: Any) -> ComfyGraph:
    if not is_api_format(data):
        raise ComfyFormatError("not ComfyUI API format: expected {id: {class_type, inputs}}")
    if len(data) > MAX_NODES:
        raise ComfyFormatError(
            f"the workflow has {len(data):,} nodes, more than the {MAX_NODES:,} an import may have; refused "
            "(a big real workflow has a few hundred)"
        )
    graph = ComfyGraph(source_format="api")
    for node_id, raw in data.items():
        inputs: dict[str, Any] = {}
        raw_inputs = raw.get("inputs", {})
        if not isinstance(raw_inputs, dict):
            raise ComfyFormatError(f"node {node_id}: 'inputs' must be an object")
        for name, value in raw_inputs.items():
            inputs[name] = LinkRef(str(value[0]), value[1]) if _is_link(value) else value
        meta = raw.get("_meta")
        title = meta.get("title") if isinstance(meta, dict) and isinstance(meta.get("title"), str) else None
        graph.nodes[str(node_id)] = ComfyNode(str(node_id), raw["class_type"], inputs, title=title)
    return graph
