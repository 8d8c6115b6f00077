"""Bypass and mute: how a node (or a group's nodes) set aside in the editor changes what runs; reroutes
are passed through the same way.

Lives here: `NODE_MODES`, `node_mode`, `apply_node_modes`, `runnable`, `without_reroutes`. Imports `nodes.workflow`,
`nodes.registry`, `nodes.reroute`.

The mode is saved per node in the workflow's `ui` section (`ui.nodes.<id>.mode`), as ComfyUI keeps it
beside the graph. Before a run the graph is rewritten: a muted node is left out together with everything
that needs its outputs; a bypassed node is left out and each wire from one of its outputs is taken from its
first input of the same type instead (a LoRA or an upscale bypassed: the model or picture goes straight on).
A Reroute is a node that is always bypassed: each wire from it is taken from what is wired into it.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodes.registry import NodeRegistry
from nodes.reroute import is_pass_through
from nodes.workflow import Link, Problem, Workflow, validate

NODE_MODES = ("normal", "bypass", "mute")


def node_mode(workflow: Workflow, node_id: str) -> str:
    mode = workflow.ui.get("nodes", {}).get(node_id, {}).get("mode", "normal")
    return mode if mode in NODE_MODES else "normal"


def _pass_through(workflow: Workflow, registry: NodeRegistry, node_id: str, output: str) -> Link | None:
    """The link a passed-through node's `output` is replaced by: the input it passes on (a reroute), else
    its first wired input of the same type (a bypassed node)."""
    node = workflow.nodes[node_id]
    spec = registry.get(node.type)
    if spec is None:
        return None
    out = spec.output(output)
    if out is not None and out.passes is not None:
        return node.inputs.get(out.passes)
    out_type = out.type if out is not None else None
    for inp in spec.inputs:
        link = node.inputs.get(inp.name)
        if link is not None and out_type is not None and inp.type == out_type:
            return link
    return None


def _bypass(wf: Workflow, registry: NodeRegistry, node_ids: Iterable[str]) -> None:
    """Take `node_ids` out of `wf` (in place), rewiring their users to what they pass through."""
    # In order, so that a chain of passed-through nodes resolves to the first real producer.
    for nid in node_ids:
        for other in wf.nodes.values():
            for name, link in list(other.inputs.items()):
                if link.node == nid:
                    replacement = _pass_through(wf, registry, nid, link.output)
                    if replacement is None:
                        del other.inputs[name]
                    else:
                        other.inputs[name] = replacement
        del wf.nodes[nid]


def _wired_reroutes(wf: Workflow, registry: NodeRegistry) -> list[str]:
    # A reroute with nothing wired in stays, so validation names it ("required input 'input'...") rather
    # than the node after it.
    return [nid for nid, node in wf.nodes.items() if is_pass_through(registry.get(node.type)) and node.inputs]


def without_reroutes(workflow: Workflow, registry: NodeRegistry) -> Workflow:
    """A copy of `workflow` with every wired reroute taken out and its wires joined (for export)."""
    wf = workflow.copy()
    _bypass(wf, registry, _wired_reroutes(wf, registry))
    return wf


def apply_node_modes(workflow: Workflow, registry: NodeRegistry) -> Workflow:
    """A copy of `workflow` with bypassed nodes and reroutes passed through and muted nodes (and their
    dependants) removed."""
    wf = workflow.copy()
    modes = {nid: node_mode(wf, nid) for nid in wf.nodes}
    bypassed = [n for n, m in modes.items() if m == "bypass"]
    _bypass(wf, registry, bypassed + [n for n in _wired_reroutes(wf, registry) if n not in bypassed])
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


def runnable(workflow: Workflow, registry: NodeRegistry) -> tuple[Workflow, list[Problem]]:
    """The graph that runs (`apply_node_modes`) and every reason it cannot. An input left unfed because the
    node feeding it is bypassed and has no input of that type to pass on says so, instead of "not
    connected" about a wire the user can see."""
    wf = apply_node_modes(workflow, registry)
    gaps: dict[tuple[str, str], str] = {}
    for nid, node in workflow.nodes.items():
        for name, link in node.inputs.items():
            if (
                link.node in workflow.nodes
                and node_mode(workflow, link.node) == "bypass"
                and _pass_through(workflow, registry, link.node, link.output) is None
            ):
                gaps[(nid, name)] = link.node
    problems = []
    for problem in validate(wf, registry):
        bypassed = gaps.get((problem.node or "", problem.field or ""))
        if bypassed is not None:
            spec = registry.get(workflow.nodes[bypassed].type)
            title = f" ({spec.title})" if spec is not None else ""
            link = workflow.nodes[problem.node or ""].inputs[problem.field or ""]
            out = spec.output(link.output) if spec is not None else None
            kind = out.type.name if out is not None else link.output
            problem = Problem(
                problem.file,
                problem.node,
                problem.field,
                f"its wire comes from {bypassed!r}{title}, which is bypassed and has no {kind} input to pass "
                f"on: mute {bypassed!r} instead, or turn its bypass off",
            )
        problems.append(problem)
    return wf, problems
