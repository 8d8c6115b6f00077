"""Small node types used by the foundation tests: counters, a slow stepper, a failing node."""

from __future__ import annotations

import time
from typing import Any

from nodes.context import NodeContext
from nodes.registry import NodeRegistry, default_registry
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import FLOAT, INT, TEXT


class Calls:
    """Counts how often each node id ran, so tests can tell a cached node from a re-run one."""

    def __init__(self) -> None:
        self.by_node: dict[str, int] = {}

    def hit(self, node_id: str) -> None:
        self.by_node[node_id] = self.by_node.get(node_id, 0) + 1


def make_registry(calls: Calls) -> NodeRegistry:
    registry = default_registry(entry_point_packs=False)

    def number(ctx: NodeContext, value: int) -> dict[str, Any]:
        calls.hit(ctx.node_id)
        return {"value": value}

    def add(ctx: NodeContext, a: int, b: int) -> dict[str, Any]:
        calls.hit(ctx.node_id)
        return {"value": a + b}

    def to_text(ctx: NodeContext, value: int, style: str) -> dict[str, Any]:
        calls.hit(ctx.node_id)
        return {"text": f"{value:{'x' if style == 'hex' else 'd'}}"}

    def steps(ctx: NodeContext, value: int, steps: int, delay: float) -> dict[str, Any]:
        calls.hit(ctx.node_id)
        for i in range(steps):
            time.sleep(delay)
            ctx.progress(i + 1, steps)
        return {"value": value}

    def boom(ctx: NodeContext, value: int) -> dict[str, Any]:
        calls.hit(ctx.node_id)
        raise RuntimeError("the node broke on purpose")

    registry.register_all(
        [
            NodeSpec(
                type="Number",
                title="Number",
                category="test",
                run=number,
                params=[Param("value", "int", default=0, min=0, max=100)],
                outputs=[Output("value", INT)],
            ),
            NodeSpec(
                type="Add",
                title="Add",
                category="test",
                run=add,
                inputs=[Input("a", INT), Input("b", INT)],
                outputs=[Output("value", INT)],
            ),
            NodeSpec(
                type="ToText",
                title="To Text",
                category="test",
                run=to_text,
                inputs=[Input("value", INT)],
                params=[Param("style", "choice", default="dec", choices=("dec", "hex"))],
                outputs=[Output("text", TEXT)],
            ),
            NodeSpec(
                type="Steps",
                title="Steps",
                category="test",
                run=steps,
                inputs=[Input("value", INT)],
                params=[
                    Param("steps", "int", default=5, min=1, max=1000),
                    Param("delay", "float", default=0.01),
                ],
                outputs=[Output("value", INT)],
            ),
            NodeSpec(
                type="Boom",
                title="Boom",
                category="test",
                run=boom,
                inputs=[Input("value", INT)],
                outputs=[Output("value", INT)],
            ),
            NodeSpec(
                type="Ratio",
                title="Ratio",
                category="test",
                run=lambda ctx, x: {"value": x},
                inputs=[Input("x", FLOAT)],
                outputs=[Output("value", FLOAT)],
            ),
        ]
    )
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
