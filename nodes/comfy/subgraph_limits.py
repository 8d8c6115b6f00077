"""Bounds on expanding a UI workflow's subgraphs: totals across every copy, and no subgraph inside itself.

Lives here: `ExpansionBudget`, `refuse_self_containing`, `subgraph_name`, `list_field`, `json_chars` and the
limits `MAX_LINKS`, `MAX_EXPANDED_CHARS` (with `nodes.comfy.graph.MAX_NODES`). Imports `nodes.comfy.graph`,
`nodes.comfy.api_format` (the error), `nodes.workflow_json` (the file size limit, quoting).

Each instance of a subgraph copies its nodes, so a depth cap alone bounds nothing: a subgraph holding k
copies of another, 16 levels down, is k^16 nodes from a 10 KB file. The budget counts every copy of every
node, link and byte of node data, and refuses the import the moment a total is passed.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.api_format import ComfyFormatError
from nodes.comfy.graph import MAX_NODES
from nodes.problems import quote
from nodes.workflow_json import MAX_FILE_BYTES

MAX_LINKS = 5 * MAX_NODES  # a real workflow has two or three links per node
MAX_EXPANDED_CHARS = MAX_FILE_BYTES  # node data once expanded: more could not be saved as a workflow file


def list_field(value: Any) -> list[Any]:
    """A list field of the file; anything else (a damaged file) reads as empty."""
    return value if isinstance(value, list) else []


def json_chars(value: Any, limit: int) -> int:
    """About how many characters `value` takes as JSON, counted no further than just past `limit`."""
    size, stack = 0, [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + sum(len(str(k)) + 4 for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend(item)
        else:
            size += 4
    return size


def subgraph_name(sub: dict[str, Any]) -> str:
    name = sub.get("name")
    return quote(name if isinstance(name, str) and name else sub.get("id"))


def _self_containing(subgraphs: dict[str, dict[str, Any]]) -> list[str] | None:
    """Subgraph ids leading from one back to itself through the instances inside them, else None."""
    uses = {
        sid: list(
            dict.fromkeys(
                n["type"]
                for n in list_field(sub.get("nodes"))
                if isinstance(n, dict) and isinstance(n.get("type"), str) and n["type"] in subgraphs
            )
        )
        for sid, sub in subgraphs.items()
    }
    state: dict[str, str] = {}  # "open" while on the walk's path, then "done"
    for root in subgraphs:
        if root in state:
            continue
        path, todo = [root], [iter(uses[root])]
        state[root] = "open"
        while todo:  # depth first, without recursion
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                todo.pop()
            elif state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                todo.append(iter(uses[nxt]))
    return None


def refuse_self_containing(subgraphs: dict[str, dict[str, Any]]) -> None:
    loop = _self_containing(subgraphs)
    if loop is None:
        return
    names = [subgraph_name(subgraphs[sid]) for sid in loop]
    through = f" through {', '.join(names[1:-1])}" if len(loop) > 2 else ""
    raise ComfyFormatError(
        f"subgraph {names[0]} contains itself{through} ({' > '.join(names)}); it could never be expanded"
    )


class ExpansionBudget:
    """What the whole import may still expand: nodes, links and node data, counted across every scope."""

    def __init__(self) -> None:
        self.nodes = self.links = self.chars = 0

    def take_node(self, raw: dict[str, Any]) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ComfyFormatError(
                f"the workflow has more than {MAX_NODES:,} nodes once its subgraphs are expanded (each "
                "instance counts its subgraph's nodes again); refused, a big real workflow has a few hundred"
            )
        self.chars += json_chars(raw, MAX_EXPANDED_CHARS - self.chars)
        if self.chars > MAX_EXPANDED_CHARS:
            raise ComfyFormatError(
                f"the workflow's nodes come to more than {MAX_EXPANDED_CHARS // 2**20} MiB once its "
                "subgraphs are expanded, more than a workflow file may hold; refused"
            )

    def take_link(self, count: int = 1) -> None:
        self.links += count
        if self.links > MAX_LINKS:
            raise ComfyFormatError(
                f"the workflow has more than {MAX_LINKS:,} links once its subgraphs are expanded; refused"
            )
