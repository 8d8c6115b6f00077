"""ComfyUI's text helper nodes that Nodeloom's core set lacks.

Lives here: the node types `StringConcatenate`, `StringReplace` and `NODES`. Imports `nodes.declare`, `nodes.kinds`,
`nodes.spec`, `nodes.types`, `nodes.context`.

StringConcatenate joins two texts that may be typed in (widgets) or wired, as ComfyUI's does; our
Concatenate takes wires only, so an imported one whose texts are constants needs this node.
"""

from __future__ import annotations

from typing import Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param
from nodes.kinds import STRING, TEXT
from nodes.spec import NodeSpec, Output
from nodes.types import TEXT as TEXT_WIRE


@node_type(
    "StringConcatenate",
    title="Join Text",
    category="text",
    outputs=[Output("text", TEXT_WIRE)],
    description="string_a, the delimiter, then string_b (each typed in or wired).",
    tags=("StringConcatenate", "concatenate", "join"),
)
class StringConcatenate(Node):
    string_a: str = param(TEXT, "", comfy="string_a")
    string_b: str = param(TEXT, "", comfy="string_b")
    delimiter: str = param(STRING, "", comfy="delimiter")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return {"text": f"{self.string_a}{self.delimiter}{self.string_b}"}


@node_type(
    "StringReplace",
    title="Replace Text",
    category="text",
    outputs=[Output("text", TEXT_WIRE)],
    description="Every occurrence of find in string replaced by replace (plain text, not a pattern).",
    tags=("StringReplace", "replace"),
)
class StringReplace(Node):
    string: str = param(TEXT, "", comfy="string")
    find: str = param(STRING, "", comfy="find")
    replace: str = param(STRING, "", comfy="replace")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        # ComfyUI's StringReplace is str.replace, as here (an empty `find` inserts `replace` everywhere).
        return {"text": self.string.replace(self.find, self.replace)}


NODES: tuple[NodeSpec, ...] = (StringConcatenate.spec, StringReplace.spec)
