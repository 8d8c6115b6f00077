"""Bypass and mute: how a node (or a group's nodes) set aside in the editor changes what runs.

Lives here: `NODE_MODES`, `node_mode`, `apply_node_modes`. Imports `nodes.workflow`, `nodes.registry`.

The mode is saved per node in the workflow's `ui` section (`ui.nodes.<id>.mode`), as ComfyUI keeps it
beside the graph. Before a run the graph is rewritten: a muted node is left out together with everything
that needs its outputs; a bypassed node is left out and each wire from one of its outputs is taken from its
first input of the same type instead (a LoRA or an upscale bypassed: the model or picture goes straight on).
"""

from __future__ import annotations

from nodes.registry import NodeRegistry
from nodes.workflow import Link, Workflow

NODE_MODES = ("normal", "bypass", "mute")


def node_mode(workflow: Workflow, node_id: str) -> str:
    mode = workflow.ui.get("nodes", {}).get(node_id, {}).get("mode", "normal")
    return mode if mode in NODE_MODES else "normal"


def _pass_through(workflow: Workflow, registry: NodeRegistry, node_id: str, output: str) -> Link | None:
    """The link a bypassed node's `output` is replaced by: its first wired input of the same type."""
    node = workflow.nodes[node_id]
    spec = registry.get(node.type)
    if spec is None:
        return None
    out_type = next((o.type for o in spec.outputs if o.name == output), None)
    for inp in spec.inputs:
        link = node.inputs.get(inp.name)
        if link is not None and out_type is not None and inp.type == out_type:
            return link
    return None


def apply_node_modes(workflow: Workflow, registry: NodeRegistry) -> Workflow:
    """A copy of `workflow` with bypassed nodes passed through and muted nodes (and their dependants) removed."""
    wf = workflow.copy()
    modes = {nid: node_mode(wf, nid) for nid in wf.nodes}
    # Bypass first, so that a chain of bypassed nodes resolves to the first real producer.
    for nid in [n for n, m in modes.items() if m == "bypass"]:
        for other in wf.nodes.values():
            for name, link in list(other.inputs.items()):
                if link.node == nid:
                    replacement = _pass_through(wf, registry, nid, link.output)
                    if replacement is None:
                        del other.inputs[name]
                    else:
                        other.inputs[name] = replacement
        del wf.nodes[nid]
    gone = {nid for nid, m in modes.items() if m == "mute" and nid in wf.nodes}
    changed = True
    while changed:  # everything downstream of a muted node cannot run either
        changed = False
        for nid, node in wf.nodes.items():
            if nid not in gone and any(link.node in gone for link in node.inputs.values()):
                gone.add(nid)
                changed = True
    for nid in gone:
        del wf.nodes[nid]
    return wf
