"""Undo commands: each `redo`/`undo` is a single call on the graph model; the scene follows the model.

Lives here: one `QUndoCommand` per kind of edit. Imports Qt, `nodes.graph_model`, `nodes.workflow`.
Deletes and pastes keep a snapshot in the workflow file format and replay it (QtNodes' design).
Consecutive moves of the same items merge into one step; consecutive edits of the same parameter merge
while they belong to one typing session (the inspector's `session`: same node shown, same box focused) and
come less than `MERGE_WINDOW_S` apart.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtGui import QUndoCommand

from nodes.graph_model import GraphModel
from nodes.workflow import Link

MOVE_ID, PARAM_ID = 1, 2
MERGE_WINDOW_S = 1.5


class AddNodeCommand(QUndoCommand):
    def __init__(
        self,
        model: GraphModel,
        type_name: str,
        pos: tuple[float, float],
        params: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"Add {type_name}")
        self.model, self.type_name, self.pos, self.params = model, type_name, pos, params
        self.node_id: str | None = None

    def redo(self) -> None:
        self.node_id = self.model.add_node(self.type_name, self.pos, self.params, node_id=self.node_id)

    def undo(self) -> None:
        assert self.node_id is not None
        self.model.remove([self.node_id])


class RemoveCommand(QUndoCommand):
    """Delete nodes, wires and groups; undo restores the snapshot with the same ids and wires."""

    def __init__(
        self,
        model: GraphModel,
        node_ids: list[str],
        group_indices: list[int],
        wires: list[tuple[str, str]] | None = None,
    ) -> None:
        count = len(node_ids) + len(group_indices) + len(wires or [])
        super().__init__(f"Delete {count} item{'s' if count != 1 else ''}")
        self.model, self.node_ids, self.group_indices = model, node_ids, group_indices
        self.wires = [key for key in (wires or []) if key[0] not in node_ids]
        self.snapshot = model.snapshot(node_ids, group_indices, self.wires)

    def redo(self) -> None:
        self.model.remove(self.node_ids, self.group_indices, self.wires)

    def undo(self) -> None:
        self.model.restore(self.snapshot)


class PasteCommand(QUndoCommand):
    def __init__(
        self, model: GraphModel, snapshot: dict[str, Any], offset: tuple[float, float], text: str = "Paste"
    ) -> None:
        super().__init__(text)
        self.model, self.source, self.offset = model, snapshot, offset
        self.new_ids: list[str] = []
        self.pasted: dict[str, Any] | None = None
        self.group_indices: list[int] = []

    def redo(self) -> None:
        if self.pasted is None:
            before = len(self.model.groups())
            self.new_ids = self.model.paste(self.source, self.offset)
            self.group_indices = list(range(before, len(self.model.groups())))
            self.pasted = self.model.snapshot(self.new_ids, self.group_indices)
        else:
            self.model.restore(self.pasted)

    def undo(self) -> None:
        self.model.remove(self.new_ids, self.group_indices)


class SetInputsCommand(QUndoCommand):
    """Connect, reconnect or disconnect: a batch of (node, input) -> link changes."""

    def __init__(self, model: GraphModel, changes: dict[tuple[str, str], Link | None], text: str) -> None:
        super().__init__(text)
        self.model, self.new = model, dict(changes)
        self.old = {key: model.input_link(*key) for key in changes}

    def redo(self) -> None:
        self.model.set_inputs(self.new)

    def undo(self) -> None:
        self.model.set_inputs(self.old)


class SetParamCommand(QUndoCommand):
    """One parameter's new value; `session` tells typing sessions apart (None: never merges)."""

    def __init__(
        self, model: GraphModel, node_id: str, name: str, value: Any, session: int | None = None
    ) -> None:
        super().__init__(f"Set {node_id}.{name}")
        self.model, self.node_id, self.name, self.value = model, node_id, name, value
        self.session = session
        self.old = model.node(node_id).params.get(name)
        self.stamp = time.monotonic()

    def id(self) -> int:
        return PARAM_ID

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, SetParamCommand) or (other.node_id, other.name) != (self.node_id, self.name):
            return False
        if self.session is None or other.session != self.session or other.stamp - self.stamp > MERGE_WINDOW_S:
            return False
        self.value, self.stamp = other.value, other.stamp
        return True

    def redo(self) -> None:
        self.model.set_param(self.node_id, self.name, self.value)

    def undo(self) -> None:
        self.model.set_param(self.node_id, self.name, self.old)


class MoveCommand(QUndoCommand):
    """Nodes to new positions and groups to new rects; a drag (or a burst of nudges) is one step."""

    def __init__(
        self,
        model: GraphModel,
        nodes: dict[str, tuple[float, float]],
        groups: dict[int, list[float]] | None = None,
    ) -> None:
        count = len(nodes) + len(groups or {})
        super().__init__(f"Move {count} item{'s' if count != 1 else ''}")
        self.model, self.nodes, self.groups = model, dict(nodes), dict(groups or {})
        self.old_nodes = {nid: model.pos(nid) for nid in nodes}
        self.old_groups = {i: list(model.groups()[i]["rect"]) for i in self.groups}
        self.stamp = time.monotonic()

    def id(self) -> int:
        return MOVE_ID

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, MoveCommand) or other.stamp - self.stamp > MERGE_WINDOW_S:
            return False
        if set(other.nodes) != set(self.nodes) or set(other.groups) != set(self.groups):
            return False
        self.nodes, self.groups, self.stamp = other.nodes, other.groups, other.stamp
        return True

    def redo(self) -> None:
        self.model.move(self.nodes, self.groups)

    def undo(self) -> None:
        self.model.move(self.old_nodes, self.old_groups)


class AddGroupCommand(QUndoCommand):
    def __init__(self, model: GraphModel, title: str, rect: list[float], color: str) -> None:
        super().__init__(f"Group {title!r}")
        self.model, self.title, self.rect, self.color = model, title, rect, color
        self.index = -1

    def redo(self) -> None:
        self.index = self.model.add_group(self.title, self.rect, self.color)

    def undo(self) -> None:
        self.model.remove_group(self.index)


class UpdateGroupCommand(QUndoCommand):
    def __init__(self, model: GraphModel, index: int, **fields: Any) -> None:
        super().__init__("Edit group")
        self.model, self.index, self.new = model, index, fields
        self.old = {k: model.groups()[index].get(k) for k in fields}

    def redo(self) -> None:
        self.model.update_group(self.index, **self.new)

    def undo(self) -> None:
        self.model.update_group(self.index, **self.old)


class SetNodeUiCommand(QUndoCommand):
    """An editor field of some nodes (collapsed, bypass/mute mode): one undo step for the whole selection."""

    def __init__(self, model: GraphModel, key: str, values: dict[str, Any], text: str) -> None:
        super().__init__(text)
        self.model, self.key, self.new = model, key, dict(values)
        self.old = {nid: model.node_ui(nid, key) for nid in values}

    def redo(self) -> None:
        self.model.set_node_ui(self.key, self.new)

    def undo(self) -> None:
        self.model.set_node_ui(self.key, self.old)
