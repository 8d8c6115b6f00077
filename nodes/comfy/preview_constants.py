"""A ComfyUI PreviewAny of a constant -> our Show Text fed by a Text node holding that value.

Lives here: `PREVIEW_TYPE`, `preview_text`, `give_preview_texts`. Imports `nodes.comfy.graph`.

ComfyUI lets a constant reach any input: a switch resolved at import, or a widget value. The LTX-2.3
image-to-video template previews its switched-off prompt enhancer's output, which is then the prompt
itself, and ComfyUI shows that text in the node. Our Show Text takes a wire, so the importer adds a Text
node with the value (written as ComfyUI's PreviewAny writes it) and wires it in; the run shows the same text.
"""

from __future__ import annotations

import json
from typing import Any

from nodes.comfy.graph import ComfyGraph

PREVIEW_TYPE = "ShowText"  # what PreviewAny maps to (nodes.comfy.mapping_media)


def preview_text(value: Any) -> str:
    """The text ComfyUI's PreviewAny shows for a value: a string as it is, a number or flag as str, other
    values as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def give_preview_texts(nodes: dict[str, dict[str, Any]], texts: dict[str, str], graph: ComfyGraph) -> None:
    """Adds a Text node `<id>_text` for each Show Text `<id>` in `texts` (its constant) and wires it in."""
    for node_id, text in texts.items():
        data = nodes.get(node_id)
        if data is None or data["type"] != PREVIEW_TYPE or "text" in data["inputs"]:
            continue
        text_id = f"{node_id}_text"
        while text_id in nodes:
            text_id += "_"
        nodes[text_id] = {"type": "Text", "params": {"text": text}, "inputs": {}}
        data["inputs"]["text"] = [text_id, "text"]
        shown = text if len(text) <= 60 else f"{text[:57]}..."
        graph.note(
            graph.nodes.get(node_id),
            f"previews the constant {shown!r}: shown by Show Text through the added Text node {text_id!r}",
        )
