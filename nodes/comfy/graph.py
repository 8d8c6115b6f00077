"""A ComfyUI graph in one shape, whichever file format it came from.

Lives here: `LinkRef`, `ComfyNode`, `ComfyGraph`, `ImportNote` and the limits on a whole import
(`MAX_NODES`, `MAX_NOTES`, `NOTE_CHARS`). Imports nothing from Nodeloom.

API format already is this shape (`{id: {class_type, inputs}}`); UI format is reduced to it by
ui_format (reroutes, primitives, bypassed nodes and subgraphs resolved), plus the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Totals for one import, whatever the format: subgraph instances count once per copy.
MAX_NODES = 10_000  # a big real workflow has a few hundred nodes once its subgraphs are expanded
MAX_NOTES = 200  # notes kept for the report; the rest are counted (`ComfyGraph.notes_left_out`)
NOTE_CHARS = 400  # a note quoting a huge value is cut, so the report stays readable


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


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
    comfy_id: str | None = None  # ComfyUI's own id when `id` is a readable one (nodes.comfy.readable_ids)


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
    notes_left_out: int = 0  # notes past MAX_NOTES

    def note(self, node: ComfyNode | None, message: str) -> None:
        """Keep a note for the report: at most MAX_NOTES of them, each cut to NOTE_CHARS."""
        if len(self.notes) >= MAX_NOTES:
            self.notes_left_out += 1
            return
        node_id, class_type = (_cut(node.id, 80), _cut(node.class_type, 80)) if node else (None, None)
        self.notes.append(ImportNote(node_id, class_type, _cut(message, NOTE_CHARS)))

    def all_notes(self) -> list[ImportNote]:
        """The notes kept, then one saying how many were left out (if any)."""
        if not self.notes_left_out:
            return list(self.notes)
        return [*self.notes, ImportNote(None, None, f"{self.notes_left_out:,} more notes left out")]
