"""Bypass and mute: how a node (or a group's nodes) set aside in the editor changes what runs; reroutes
are passed through the same way.

Lives here: `NODE_MODES`, `node_mode`, `apply_node_modes`, `unneeded`, `is_wiring_problem`, `RunPlan`,
`prepare_run`, `runnable`, `skipped_note`, `without_reroutes`, `inner_problems`. Imports `nodes.workflow`, `nodes.registry`,
`nodes.reroute`, `nodes.latent_sizing`, `nodes.subgraph` (instances expanded before a run), `nodes.subgraph_check`.

The mode is saved per node in the workflow's `ui` section (`ui.nodes.<id>.mode`), as ComfyUI keeps it
beside the graph. Before a run the graph is rewritten: a muted node is left out together with everything
that needs its outputs; a bypassed node is left out and each wire from one of its outputs is taken from its
first input of the same type instead (a LoRA or an upscale bypassed: the model or picture goes straight on).
A Reroute is a node that is always bypassed: each wire from it is taken from what is wired into it.

As in ComfyUI, a run runs what feeds an output and skips the rest: a leftover node no output needs (a Text
Encode with nothing wired in) is named as skipped, not an error; a missing input on a node an output needs
stays one. A graph with no output node at all runs every node, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nodes.latent_sizing import wire_unsized_latents
from nodes.problems import WorkflowError
from nodes.registry import NodeRegistry
from nodes.reroute import is_pass_through
from nodes.subgraph import expand_subgraphs
from nodes.subgraph_check import name_inner
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
    dependants) removed. Subgraph instances are expanded into their nodes first."""
    wf = expand_subgraphs(workflow)
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


def unneeded(workflow: Workflow, registry: NodeRegistry) -> list[str]:
    """The nodes no output node needs, in graph order; none when the graph has no output node (then all run).
    Links to nodes that do not exist are ignored here (validation names them)."""
    sinks = [nid for nid, n in workflow.nodes.items() if (spec := registry.get(n.type)) and spec.is_output]
    if not sinks:
        return []
    needed: set[str] = set()
    todo = list(sinks)
    while todo:
        nid = todo.pop()
        if nid in needed or nid not in workflow.nodes:
            continue
        needed.add(nid)
        todo.extend(link.node for link in workflow.nodes[nid].inputs.values())
    return [nid for nid in workflow.nodes if nid not in needed]


def is_wiring_problem(workflow: Workflow, registry: NodeRegistry, problem: Problem) -> bool:
    """A problem with one of the node's input ports (not connected, a type mismatch): what a skipped node
    may have without stopping the run."""
    node = workflow.nodes.get(problem.node or "")
    spec = registry.get(node.type) if node is not None else None
    return spec is not None and problem.field is not None and spec.input(problem.field) is not None


@dataclass
class RunPlan:
    """What a Run runs: the graph (`apply_node_modes`, unneeded nodes left out), every reason it cannot run,
    the nodes skipped because no output needs them, and the Empty Latents sized by their sampler's model."""

    workflow: Workflow
    problems: list[Problem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sized_by_sampler: list[str] = field(default_factory=list)


def prepare_run(workflow: Workflow, registry: NodeRegistry) -> RunPlan:
    """The graph that runs and every reason it cannot. An input left unfed because the node feeding it is
    bypassed and has no input of that type to pass on says so, instead of "not connected" about a wire the
    user can see. A node of an unknown type is refused even when skipped (as ComfyUI refuses the prompt)."""
    wf = apply_node_modes(workflow, registry)
    skipped = [nid for nid in unneeded(wf, registry) if registry.get(wf.nodes[nid].type) is not None]
    # A skipped node's wiring is not the run's business; a value out of range on it still is (it is a typo
    # the user would want to hear about, and was refused before).
    kept = [p for p in validate(wf, registry) if p.node in skipped and not is_wiring_problem(wf, registry, p)]
    for nid in skipped:
        del wf.nodes[nid]
    sized = wire_unsized_latents(wf, registry)
    gaps: dict[tuple[str, str], str] = {}
    for nid, node in workflow.nodes.items():
        for name, link in node.inputs.items():
            if (
                link.node in workflow.nodes
                and node_mode(workflow, link.node) == "bypass"
                and _pass_through(workflow, registry, link.node, link.output) is None
            ):
                gaps[(nid, name)] = link.node
    problems = kept
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
        problems.append(name_inner(workflow, problem))  # a node inside a subgraph: which subgraph
    return RunPlan(wf, problems, skipped, sized)


def runnable(workflow: Workflow, registry: NodeRegistry) -> tuple[Workflow, list[Problem]]:
    """`prepare_run`'s graph and problems (for callers that do not report skipped nodes)."""
    plan = prepare_run(workflow, registry)
    return plan.workflow, plan.problems


def skipped_note(workflow: Workflow, registry: NodeRegistry, skipped: list[str]) -> str:
    """One line naming the skipped nodes, for the log and `app --run` ("" when none)."""
    if not skipped:
        return ""
    names = []
    for nid in skipped:
        spec = registry.get(workflow.nodes[nid].type) if nid in workflow.nodes else None
        names.append(f"{nid} ({spec.title})" if spec is not None else nid)
    return f"skipped (no output needs {'it' if len(names) == 1 else 'them'}): {', '.join(names)}"


def inner_problems(wf: Workflow, registry: NodeRegistry) -> list[Problem]:
    """Every reason a run would refuse a node inside one of `wf`'s subgraph instances (nodes no output needs
    are skipped, as the run skips them), named by `name_inner`; [] for a graph without instances."""
    if not any(n.type in wf.subgraphs for n in wf.nodes.values()):
        return []
    try:
        plan = prepare_run(wf.copy(), registry)
    except WorkflowError as exc:  # nesting too deep: said once, about the subgraphs
        return list(exc.problems)
    return [name_inner(wf, p) for p in plan.problems if p.node is not None and "/" in p.node]
