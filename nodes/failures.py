"""How a node's failure reads, and which models a node hands to the rest of a run (for the budget check).

Lives here: `exception_message`, `with_field`, `wired_models`. Imports `nodes.spec`, `nodes.workflow` (types);
the executor calls them, so the CLI, the editor and reports get one wording (`nodes.events.failure_text`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from nodes.spec import NodeSpec
from nodes.workflow import Workflow


def exception_message(exc: BaseException) -> str:
    """What an exception says, as a phrase a user can read (its class name only when it says nothing)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return f"no entry {exc.args[0]!r}"  # str(KeyError('x')) is just "'x'"
    text = str(exc).strip()
    return text or f"an internal error with no message ({type(exc).__name__})"


def with_field(spec: NodeSpec, kwargs: dict[str, Any], message: str) -> str:
    """`message`, led by the file parameter it is about when it names that file and no field yet."""
    if message.startswith("field "):
        return message
    for param in spec.params:
        value = kwargs.get(param.name)
        if param.kind == "path" and isinstance(value, str) and value:
            name = os.path.basename(value.rstrip("/"))
            if name and name in message:
                return f"field {param.name!r}: {message}"
    return message


def wired_models(
    wf: Workflow,
    nid: str,
    remaining: Iterable[str],
    outputs: dict[str, Any],
    model_keys: Callable[[Any], set[str]],
) -> list[str]:
    """Keys of the models `nid`'s outputs carry into the nodes still to run, in the order they are used."""
    keys: list[str] = []
    for other in remaining:
        for link in wf.nodes[other].inputs.values():
            if link.node == nid:
                keys += sorted(model_keys(outputs.get(link.output)))
    return list(dict.fromkeys(keys))
