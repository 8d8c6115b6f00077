"""Validation inside subgraph definitions: what a run of the graph would refuse on the nodes inside its
subgraph instances, each problem naming the subgraph and the inner node.

Lives here: `inner_problems`, `name_inner`. Imports `nodes.workflow`, `nodes.problems` (and `nodes.modes`
when `inner_problems` is called: modes imports this module for `name_inner`).

A run expands every instance into its inner nodes (`prompts/positive`) and validates that graph, so the run
refused an unwired input inside a subgraph, but `app check` (which validates the graph as saved, instances
as single nodes) said "ok", and the run's message named only the path. Both now say which subgraph:
"required input 'text_encoder' (TEXT_ENCODER) is not connected (node 'positive' inside subgraph 'Prompts')".
"""

from __future__ import annotations

from nodes.problems import Problem, WorkflowError, quote
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow

INSIDE = " inside subgraph "


def name_inner(wf: Workflow, problem: Problem) -> Problem:
    """`problem` with its subgraph named when its node is inside an instance of `wf` ("prompts/positive"),
    else as it is. `wf` is the graph as the user has it (instances not expanded)."""
    node_id = problem.node or ""
    instance, _, inner = node_id.partition("/")
    node = wf.nodes.get(instance)
    if not inner or node is None or node.type not in wf.subgraphs or INSIDE in problem.reason:
        return problem
    title = str(wf.subgraphs[node.type].get("title") or node.type)
    where = f"node {quote(inner)}{INSIDE}{quote(title)}"
    return Problem(problem.file, problem.node, problem.field, f"{problem.reason} ({where})")


def inner_problems(wf: Workflow, registry: NodeRegistry) -> list[Problem]:
    """Every reason a run would refuse a node inside one of `wf`'s subgraph instances (nodes no output needs
    are skipped, as the run skips them), named by `name_inner`; [] for a graph without instances."""
    from nodes.modes import prepare_run

    if not any(n.type in wf.subgraphs for n in wf.nodes.values()):
        return []
    try:
        plan = prepare_run(wf.copy(), registry)
    except WorkflowError as exc:  # nesting too deep: said once, about the subgraphs
        return list(exc.problems)
    return [name_inner(wf, p) for p in plan.problems if p.node is not None and "/" in p.node]
