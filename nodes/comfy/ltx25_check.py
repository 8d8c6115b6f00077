"""LTX-2.5 workflows: their Gemma 4 text encoder is one Nodeloom's LTX-2 family does not load.

Lives here: `ltx25_findings`. Imports `nodes.comfy.graph` only. Used by `nodes.comfy.family_check`.

ComfyUI runs LTX-2.5 with a CLIPLoader of type "ltxv", as LTX-2.x, and its transformer's file name says
"ltx-2.5", which our name markers take as LTX-2; but the text encoder is a Gemma 4 file (LTX-2.3's is Gemma 3,
the one our LTX-2 family reads), so without this finding such a workflow would count as runnable.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph

_CLIP_LOADERS = ("CLIPLoader", "DualCLIPLoader")
_GEMMA4 = ("gemma4", "gemma-4", "gemma_4")
FAMILY = "ltx2_5"
WHAT = "LTX-2.5's Gemma 4 text encoder"


def _gemma4_name(node_inputs: dict[str, Any]) -> str | None:
    for widget in ("clip_name", "clip_name1", "clip_name2"):
        name = node_inputs.get(widget)
        if isinstance(name, str) and any(marker in name.lower() for marker in _GEMMA4):
            return widget
    return None


def ltx25_findings(graph: ComfyGraph) -> list[tuple[str, str, str, str, str]]:
    """(node id, class, field, family, evidence) for the workflow's LTX-2.5 text encoder loader (once per
    workflow: the Gemma 4 file made for LTX, else the first Gemma 4 file an "ltxv" CLIP loader names)."""
    found: list[tuple[str, str, str, str, str]] = []
    for node_id, node in graph.nodes.items():
        if node.class_type not in _CLIP_LOADERS or node.inputs.get("type") != "ltxv":
            continue
        widget = _gemma4_name(node.inputs)
        if widget is not None:
            name = node.inputs[widget]
            found.append((node_id, node.class_type, widget, FAMILY, f"{name!r}: {WHAT}"))
    found.sort(key=lambda f: "ltx" not in f[4].split(":")[0].lower())  # the LTX text encoder first
    return found[:1]
