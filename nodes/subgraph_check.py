"""Validation inside subgraph definitions: what a run of the graph would refuse on the nodes inside its
subgraph instances, each problem naming the subgraph and the inner node.

Lives here: `name_inner`. Imports `nodes.workflow`, `nodes.problems`. (`nodes.modes.inner_problems` lists the
problems; it lives beside `prepare_run`, which it runs.)

A run expands every instance into its inner nodes (`prompts/positive`) and validates that graph, so the run
refused an unwired input inside a subgraph, but `app check` (which validates the graph as saved, instances
as single nodes) said "ok", and the run's message named only the path. Both now say which subgraph:
"required input 'text_encoder' (TEXT_ENCODER) is not connected (node 'positive' inside subgraph 'Prompts')".
"""

from __future__ import annotations

from nodes.problems import Problem, quote
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
