"""A third-party node pack used by the tests: found through the `nodeloom.nodes` entry point group."""

from __future__ import annotations

import time
from typing import Any

from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import TEXT


def _shout(ctx: Any, text: str, times: int) -> dict[str, Any]:
    return {"text": (text.upper() + "!") * times}


def _slow(ctx: Any, text: str, steps: int, delay: float) -> dict[str, Any]:
    for i in range(steps):
        time.sleep(delay)
        ctx.progress(i + 1, steps)
    return {"text": text}


NODES = (
    NodeSpec(
        type="testpack.Shout",
        title="Shout",
        category="test pack",
        run=_shout,
        inputs=[Input("text", TEXT)],
        params=[Param("times", "int", default=1, min=1, max=5)],
        outputs=[Output("text", TEXT)],
        description="Upper-cases the text.",
    ),
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
