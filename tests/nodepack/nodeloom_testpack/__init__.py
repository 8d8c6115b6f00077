"""A third-party node pack used by the tests: found through the `nodeloom.nodes` entry point group.

`Shout` is written the way a pack should write a node type (one typed declaration, nodes.declare);
`Slow` keeps the older `NodeSpec(..., run=function)` form, which still loads, so the pack proves both do.
"""

from __future__ import annotations

import time
from typing import Any

from nodes import kinds
from nodes.declare import Node, node_type, param, wire
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import TEXT


@node_type(
    "testpack.Shout",
    title="Shout",
    category="test pack",
    outputs=[Output("text", TEXT)],
    description="Upper-cases the text.",
)
class Shout(Node):
    text: str = wire(TEXT)
    times: int = param(kinds.INT, 1, min=1, max=5)

    def run(self, ctx: Any) -> dict[str, Any]:
        return {"text": (self.text.upper() + "!") * self.times}


def _slow(ctx: Any, text: str, steps: int, delay: float) -> dict[str, Any]:
    for i in range(steps):
        time.sleep(delay)
        ctx.progress(i + 1, steps)
    return {"text": text}


NODES = (
    Shout.spec,
    NodeSpec(
        type="testpack.Slow",
        title="Slow",
        category="test pack",
        run=_slow,
        inputs=[Input("text", TEXT)],
        params=[Param("steps", "int", default=10, min=1, max=100000), Param("delay", "float", default=0.05)],
        outputs=[Output("text", TEXT)],
        description="Passes the text through, slowly.",
    ),
)
