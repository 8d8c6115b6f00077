"""Edit > Arrange: a layered auto-layout by data flow (`nodes.layout.layered_layout`) for the selection, or the
whole graph when fewer than two nodes are selected; one undo step.

Lives here: `ArrangeCommand`, `arrange`, `install`. Imports Qt, `app.gui.commands`, `nodes.layout`.

The arranged nodes keep their block's top-left corner, so arranging a selection tidies it in place instead of
moving it to the origin; wires from outside the selection are ignored for the layering (only the selected
nodes' own data flow orders them). Sizes are the items' real sizes, so collapsed nodes and tall nodes with a
picture take the room they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence, QUndoCommand

from app.gui.commands import MoveCommand
from nodes.layout import layered_layout

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow
    from nodes.graph_model import GraphModel


class ArrangeCommand(MoveCommand):
    """A MoveCommand named "Arrange N nodes" that never merges with a drag that follows it."""

    def __init__(self, model: GraphModel, nodes: dict[str, tuple[float, float]]) -> None:
        super().__init__(model, nodes)
        self.setText(f"Arrange {len(nodes)} node{'s' if len(nodes) != 1 else ''}")

    def id(self) -> int:
        return -1  # no merging: the next drag is its own undo step

    def mergeWith(self, other: QUndoCommand) -> bool:  # noqa: N802 (Qt name)
        return False


def arrange(window: MainWindow) -> int:
    """Lay out the selected nodes (or all of them); returns how many moved."""
    scene, model = window.scene, window.model
    selected = [nid for nid, item in scene.node_items.items() if item.isSelected()]
    ids = selected if len(selected) >= 2 else list(model.node_ids())
    if len(ids) < 2:
        window.status("Arrange: nothing to arrange (add nodes, or select two or more)")
        return 0
    chosen = set(ids)
    sources = {
        nid: [link.node for link in model.node(nid).inputs.values() if link.node in chosen] for nid in ids
    }
    sizes = {}
    for nid in ids:
        rect = scene.node_items[nid].boundingRect()
        sizes[nid] = (rect.width(), rect.height())
    placed = layered_layout(ids, sources, sizes)
    left = min(model.pos(nid)[0] for nid in ids)
    top = min(model.pos(nid)[1] for nid in ids)
    moves = {
        nid: (left + x, top + y) for nid, (x, y) in placed.items() if (left + x, top + y) != model.pos(nid)
    }
    if not moves:
        window.status("Arrange: already laid out")
        return 0
    window.undo_stack.push(ArrangeCommand(model, moves))
    what = "the selection" if len(selected) >= 2 else "the graph"
    window.status(f"Arranged {what}: {len(moves)} node(s) moved (Ctrl+Z undoes it)")
    return len(moves)


def install(window: MainWindow) -> QAction:
    action = QAction("A&rrange", window)
    action.setShortcut(QKeySequence("Ctrl+Shift+L"))
    action.setToolTip("Lay out the selection (or the whole graph) by data flow, left to right (Ctrl+Shift+L)")
    action.triggered.connect(lambda: arrange(window))
    window.view.addAction(action)
    window.edit_menu.addSeparator()
    window.edit_menu.addAction(action)
    return action
