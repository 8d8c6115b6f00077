"""Small node types used by the foundation tests: counters, a slow stepper, a failing node."""

from __future__ import annotations

import time
from typing import Any

from nodes import kinds
from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.registry import NodeRegistry, default_registry
from nodes.spec import Output
from nodes.types import FLOAT, INT, TEXT


class Calls:
    """Counts how often each node id ran, so tests can tell a cached node from a re-run one."""

    def __init__(self) -> None:
        self.by_node: dict[str, int] = {}

    def hit(self, node_id: str) -> None:
        self.by_node[node_id] = self.by_node.get(node_id, 0) + 1


def make_registry(calls: Calls) -> NodeRegistry:
    registry = default_registry(entry_point_packs=False)

    @node_type("Number", title="Number", category="test", outputs=[Output("value", INT)])
    class Number(Node):
        value: int = param(kinds.INT, 0, min=0, max=100)

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            calls.hit(ctx.node_id)
            return {"value": self.value}

    @node_type("Add", title="Add", category="test", outputs=[Output("value", INT)])
    class Add(Node):
        a: int = wire(INT)
        b: int = wire(INT)

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            calls.hit(ctx.node_id)
            return {"value": self.a + self.b}

    @node_type("ToText", title="To Text", category="test", outputs=[Output("text", TEXT)])
    class ToText(Node):
        value: int = wire(INT)
        style: str = param(kinds.CHOICE, "dec", choices=("dec", "hex"))

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            calls.hit(ctx.node_id)
            return {"text": f"{self.value:{'x' if self.style == 'hex' else 'd'}}"}

    @node_type("Steps", title="Steps", category="test", outputs=[Output("value", INT)])
    class Steps(Node):
        value: int = wire(INT)
        steps: int = param(kinds.INT, 5, min=1, max=1000)
        delay: float = param(kinds.FLOAT, 0.01)

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            calls.hit(ctx.node_id)
            for i in range(self.steps):
                time.sleep(self.delay)
                ctx.progress(i + 1, self.steps)
            return {"value": self.value}

    @node_type("Boom", title="Boom", category="test", outputs=[Output("value", INT)])
    class Boom(Node):
        value: int = wire(INT)

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            calls.hit(ctx.node_id)
            raise RuntimeError("the node broke on purpose")

    @node_type("Ratio", title="Ratio", category="test", outputs=[Output("value", FLOAT)])
    class Ratio(Node):
        x: float = wire(FLOAT)

        def run(self, ctx: NodeContext) -> dict[str, Any]:
            return {"value": self.x}

    registry.register_all(n.spec for n in (Number, Add, ToText, Steps, Boom, Ratio))
    return registry


def chain_workflow() -> dict[str, Any]:
    """one + two -> sum -> text -> save; a side branch `other` that nothing needs."""
    return {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "one": {"type": "Number", "params": {"value": 1}},
            "two": {"type": "Number", "params": {"value": 2}},
            "sum": {"type": "Add", "inputs": {"a": ["one", "value"], "b": ["two", "value"]}},
            "text": {"type": "ToText", "params": {"style": "dec"}, "inputs": {"value": ["sum", "value"]}},
            "save": {"type": "SaveText", "params": {"prefix": "sum"}, "inputs": {"text": ["text", "text"]}},
            "other": {"type": "Number", "params": {"value": 7}},
        },
        "ui": {"nodes": {"one": {"pos": [0, 0]}}},
    }
