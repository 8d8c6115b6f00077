"""A ComfyUI graph in one shape, whichever file format it came from.

Lives here: `LinkRef`, `ComfyNode`, `ComfyGraph`, `ImportNote`. Imports nothing from Nodeloom.

API format already is this shape (`{id: {class_type, inputs}}`); UI format is reduced to it by
ui_format (reroutes, primitives, bypassed nodes and subgraphs resolved), plus the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LinkRef:
    """An input fed by output `slot` of node `node` (ComfyUI ids are strings here: "12", "7:3")."""

    node: str
    slot: int


@dataclass
class ComfyNode:
    id: str
    class_type: str
    inputs: dict[str, Any] = field(default_factory=dict)  # name -> constant or LinkRef
    title: str | None = None
    pos: tuple[float, float] | None = None
    size: tuple[float, float] | None = None
    color: str | None = None
    collapsed: bool = False  # UI format's flags.collapsed: our ui.nodes.<id>.collapsed


@dataclass(frozen=True)
class ImportNote:
    """Something the user should know about the import: per node, or for the whole file (node None)."""

    node: str | None
    class_type: str | None
    message: str

    def __str__(self) -> str:
        if self.node is None:
            return self.message
        return f"node {self.node} ({self.class_type}): {self.message}"


@dataclass
class ComfyGraph:
    nodes: dict[str, ComfyNode] = field(default_factory=dict)
    notes: list[ImportNote] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)  # our ui groups: title, rect, color
    text_notes: list[dict[str, Any]] = field(default_factory=list)  # Note/MarkdownNote: text, pos
    view: dict[str, Any] = field(default_factory=dict)
    source_format: str = "api"  # "api" or "ui"

    def note(self, node: ComfyNode | None, message: str) -> None:
        self.notes.append(ImportNote(node.id if node else None, node.class_type if node else None, message))
