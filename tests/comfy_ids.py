"""Test helpers: an imported workflow's nodes looked up by their ComfyUI ids.

Lives here: `by_comfy_id`, `our_id`. Imports nothing from Nodeloom.

An import gives readable ids (`ksampler`, `vae_decode`) and keeps ComfyUI's in `meta.comfyui.ids`; tests
written against a ComfyUI file's ids look nodes up through that table.
"""

from __future__ import annotations

from typing import Any


def our_id(workflow: dict[str, Any], comfy_id: str) -> str:
    """The readable id the import gave ComfyUI's node `comfy_id`."""
    ids = workflow["meta"]["comfyui"]["ids"]
    found = [ours for ours, theirs in ids.items() if theirs == comfy_id]
    assert len(found) == 1, f"ComfyUI node {comfy_id!r} is not one node of the import: {found}"
    return found[0]


def by_comfy_id(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """ComfyUI id -> our node's JSON (a copy), its wires naming ComfyUI ids too: the import seen with the
    ids of the ComfyUI file, for assertions written against that file."""
    ids = workflow["meta"]["comfyui"]["ids"]
    assert sorted(ids) == sorted(workflow["nodes"]), "every imported node keeps its ComfyUI id"
    out: dict[str, dict[str, Any]] = {}
    for nid, node in workflow["nodes"].items():
        inputs = {port: [ids[link[0]], *link[1:]] for port, link in node["inputs"].items()}
        out[ids[nid]] = {**node, "inputs": inputs}
    return out
