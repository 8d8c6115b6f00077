"""The Reroute node and the pass-through rule: a dot on a wire that passes any value on unchanged.

Lives here: the `Reroute` node type (`REROUTE` is its spec), `REROUTE_TYPE`, `NODES`, `is_pass_through`,
`link_type`, `passed_on_to`. Imports `nodes.declare`, `nodes.spec`, `nodes.types` (and `nodes.workflow`/
`nodes.registry` for type hints only: `nodes.workflow` imports this module).

Its output declares `passes="input"`: a wire out of a reroute carries the type of whatever is wired into
it (`link_type`), so typed-wire checks stay honest through any chain of reroutes, and what is wired into a
reroute must suit every input it ends up feeding (`passed_on_to`). Before a run, reroutes are taken out of
the graph the way bypassed nodes are (`nodes.modes.apply_node_modes`), so a reroute never runs, never costs
a cache entry and never changes what is cached; its `run` only matters for code that runs a graph without
that step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.declare import Node, node_type, wire
from nodes.spec import NodeSpec, Output
from nodes.types import ANY, PortType

if TYPE_CHECKING:
    from nodes.context import NodeContext
    from nodes.registry import NodeRegistry
    from nodes.workflow import Workflow

REROUTE_TYPE = "Reroute"


@node_type(
    REROUTE_TYPE,
    title="Reroute",
    category="utils",
    outputs=[Output("output", ANY, help="Whatever is wired in, unchanged.", passes="input")],
    description="A dot on a wire: passes any value through unchanged, to route long wires tidily. "
    "Double-click a wire to drop one on it.",
    tags=("wire", "dot", "route", "relay"),
)
class Reroute(Node):
    input: Any = wire(ANY, help="Any value; the output carries it on with its type.")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"output": self.input}


REROUTE = Reroute.spec
NODES: tuple[NodeSpec, ...] = (REROUTE,)


def is_pass_through(spec: NodeSpec | None) -> bool:
    """A node type whose outputs only pass inputs on (a Reroute): it is wiring, not work."""
    return spec is not None and bool(spec.outputs) and all(o.passes is not None for o in spec.outputs)


def link_type(wf: Workflow, registry: NodeRegistry, node_id: str, output: str) -> PortType | None:
    """The type a wire from `node_id.output` carries: the output's declared type, or, for an output that
    passes an input on, the type of what is wired into that input, followed through chains.
    None when the node or output is unknown, or a pass-through has nothing wired in (it carries nothing yet).
    """
    seen: set[tuple[str, str]] = set()
    while (node_id, output) not in seen:  # a loop of reroutes is reported as a cycle elsewhere
        seen.add((node_id, output))
        node = wf.nodes.get(node_id)
        spec = registry.get(node.type) if node is not None else None
        out = spec.output(output) if spec is not None else None
        if node is None or out is None:
            return None
        if out.passes is None:
            return out.type
        link = node.inputs.get(out.passes)
        if link is None:
            return None
        node_id, output = link.node, link.output
    return None


def passed_on_to(wf: Workflow, registry: NodeRegistry, node_id: str, port: str) -> list[tuple[str, str]]:
    """The (node, input) pairs that receive what is wired into `node_id.port` when that input is passed on
    (through any chain of reroutes); empty for an ordinary input."""
    found: list[tuple[str, str]] = []
    todo, seen = [(node_id, port)], set()
    while todo:
        nid, inp = todo.pop()
        node = wf.nodes.get(nid)
        spec = registry.get(node.type) if node is not None else None
        if (nid, inp) in seen or spec is None:
            continue
        seen.add((nid, inp))
        outs = {o.name for o in spec.outputs if o.passes == inp}
        if not outs:
            continue  # an ordinary input: nothing passes on (the common case, checked per port while dragging)
        for user_id, user in wf.nodes.items():
            user_spec = registry.get(user.type)
            for name, link in user.inputs.items():
                if link.node != nid or link.output not in outs:
                    continue
                if user_spec is not None and any(o.passes == name for o in user_spec.outputs):
                    todo.append((user_id, name))
                else:
                    found.append((user_id, name))
    return found
