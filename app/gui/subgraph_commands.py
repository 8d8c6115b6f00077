"""Undo commands for subgraphs: make, expand, insert a blueprint (the shown level replaced by a new workflow),
promote a widget (the graph around the open subgraph replaced), and opening / leaving a subgraph.

Lives here: `ReplaceLevelCommand`, `PromoteCommand`, `EnterCommand`, `LeaveCommand`. Imports Qt,
`nodes.subgraph_edit`, `nodes.workflow`.

Each subgraph edit is a pure function of the workflow (nodes.subgraph), so a command keeps the level as it
was and as it becomes and swaps them, one model call each way (the QtNodes shape of app/gui/commands.py).
Opening and leaving are commands too: undoing an edit made inside a subgraph first undoes the "Back to
Graph" that followed it, so the edit is undone on the level it was made on.
"""

from __future__ import annotations

from PySide6.QtGui import QUndoCommand

from nodes.subgraph_edit import NestedGraphModel
from nodes.workflow import Workflow


class ReplaceLevelCommand(QUndoCommand):
    """The level on the canvas becomes `new` (made by a pure subgraph edit); undo puts the old one back."""

    def __init__(self, model: NestedGraphModel, new: Workflow, text: str) -> None:
        super().__init__(text)
        self.model, self.old, self.new = model, model.workflow.copy(), new.copy()

    def redo(self) -> None:
        self.model.replace(self.new)

    def undo(self) -> None:
        self.model.replace(self.old)


class PromoteCommand(QUndoCommand):
    """An inner widget shown on every instance (or, `show` off, taken off them): the graph around the open
    subgraph changes."""

    def __init__(self, model: NestedGraphModel, node_id: str, param: str, show: bool = True) -> None:
        super().__init__(f"{'Show' if show else 'Hide'} {node_id}.{param} on the subgraph node")
        self.model = model
        self.old = model.parent_workflow()
        self.new = model.promote(node_id, param) if show else model.demote(node_id, param)

    def redo(self) -> None:
        self.model.set_parent_workflow(self.new)

    def undo(self) -> None:
        self.model.set_parent_workflow(self.old)


class EnterCommand(QUndoCommand):
    def __init__(self, model: NestedGraphModel, instance_id: str, title: str) -> None:
        super().__init__(f"Open subgraph {title}")
        self.model, self.instance_id = model, instance_id

    def redo(self) -> None:
        self.model.enter(self.instance_id)

    def undo(self) -> None:
        self.model.leave(1)


class LeaveCommand(QUndoCommand):
    """Back out of `levels` open subgraphs (the breadcrumb); undo opens them again."""

    def __init__(self, model: NestedGraphModel, levels: int, target: str) -> None:
        super().__init__(f"Back to {target}")
        self.model, self.levels = model, levels
        self.left: list[str] = []

    def redo(self) -> None:
        self.left = self.model.leave(self.levels)

    def undo(self) -> None:
        for instance in self.left:
            self.model.enter(instance)
