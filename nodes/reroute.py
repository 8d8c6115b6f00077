"""The Reroute node: a dot on a wire that passes any value on unchanged, to tidy long wires.

Lives here: `REROUTE`, `NODES`, `is_pass_through`. Imports `nodes.spec`, `nodes.types`.

Its output declares `passes="input"`: a wire out of a reroute carries the type of whatever is wired into
it (`nodes.workflow.link_type`), so typed-wire checks stay honest through any chain of reroutes. Before a
run, reroutes are taken out of the graph the way bypassed nodes are (`nodes.modes.apply_node_modes`), so a
reroute never runs, never costs a cache entry and never changes what is cached; its `run` only matters for
code that runs a graph without that step.
"""

from __future__ import annotations

from typing import Any

from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output
from nodes.types import ANY

REROUTE_TYPE = "Reroute"


def _run_reroute(ctx: NodeContext, input: Any) -> dict[str, Any]:  # noqa: A002 - the port's name
    return {"output": input}


REROUTE = NodeSpec(
    type=REROUTE_TYPE,
    title="Reroute",
    category="utils",
    run=_run_reroute,
    inputs=[Input("input", ANY, help="Any value; the output carries it on with its type.")],
    outputs=[Output("output", ANY, help="Whatever is wired in, unchanged.", passes="input")],
    description="A dot on a wire: passes any value through unchanged, to route long wires tidily. "
    "Double-click a wire to drop one on it.",
    tags=("wire", "dot", "route", "relay"),
)

NODES: tuple[NodeSpec, ...] = (REROUTE,)


def is_pass_through(spec: NodeSpec | None) -> bool:
    """A node type whose outputs only pass inputs on (a Reroute): it is wiring, not work."""
    return spec is not None and bool(spec.outputs) and all(o.passes is not None for o in spec.outputs)
