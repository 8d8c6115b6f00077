"""What the editor shows of subgraphs besides the nodes: the breadcrumb over the canvas while one is open, and
one run state for a subgraph node from its inner nodes' states.

Lives here: `ROOT_NAME`, `Breadcrumb`, `summary_state`. Imports Qt, `app.gui.theme`, `app.gui.node_item`
(NodeRunState); the breadcrumb calls back into `app.gui.subgraph_ops.SubgraphOps`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

from app.gui import theme
from app.gui.node_item import NodeRunState

if TYPE_CHECKING:
    from app.gui.subgraph_ops import SubgraphOps

ROOT_NAME = "Graph"


class Breadcrumb(QWidget):
    """ "Graph > My subgraph" over the canvas's top-left corner while a subgraph is open; each earlier crumb
    is a button that goes back to that level."""

    def __init__(self, ops: SubgraphOps, parent: QWidget) -> None:
        super().__init__(parent)
        self.ops = ops
        self.setObjectName("subgraphBreadcrumb")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet(
            f"#subgraphBreadcrumb {{ background: rgba(20, 21, 25, 225); border: 1px solid {theme.NODE_BORDER};"
            " border-radius: 6px; }"
            f" QToolButton {{ color: {theme.TEXT}; border: none; padding: 2px 6px; }}"
            f" QToolButton:hover {{ color: {theme.SELECTED}; text-decoration: underline; }}"
            f" QLabel {{ color: {theme.TEXT_DIM}; }}"
        )
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(6, 3, 8, 3)
        self.row.setSpacing(2)
        self.crumbs: list[QToolButton] = []

    def refresh(self) -> None:
        while self.row.count():
            item = self.row.takeAt(0)
            if item.widget() is not None:  # hidden now: deleteLater leaves it painted until the loop runs
                item.widget().hide()
                item.widget().deleteLater()
        self.crumbs = []
        names = [ROOT_NAME, *(level.title for level in self.ops.model.levels())]
        for depth, name in enumerate(names):
            if depth:
                self.row.addWidget(QLabel("›"))
            if depth == len(names) - 1:
                current = QLabel(f"<b style='color:{theme.TEXT}'>{name}</b>")
                current.setObjectName("currentCrumb")
                self.row.addWidget(current)
                continue
            button = QToolButton()
            button.setText(name)
            button.setToolTip(f"Back to {name}")
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.clicked.connect(lambda _checked=False, d=depth: self.ops.leave_to(d))
            self.row.addWidget(button)
            self.crumbs.append(button)
        self.setVisible(len(names) > 1)
        self.adjustSize()
        self.move(12, 12)

    def text(self) -> str:
        return " > ".join([ROOT_NAME, *(level.title for level in self.ops.model.levels())])


def summary_state(by_node: dict[str, NodeRunState], planned: int) -> NodeRunState:
    """One state for a subgraph instance from its inner nodes' states (`planned` of them in the run); an
    error names the inner node."""
    states = list(by_node.values())
    by = {s.status for s in states}
    if "error" in by:
        node, first = next((n, s) for n, s in by_node.items() if s.status == "error")
        return NodeRunState("error", seconds=first.seconds, message=f"{node}: {first.message}")
    running = [s for s in states if s.status == "running"]
    if running:
        return running[-1]
    finished = [s for s in states if s.status in ("done", "cached")]
    if finished and len(finished) >= planned:
        if all(s.status == "cached" for s in finished):
            return NodeRunState("cached")
        return NodeRunState("done", seconds=sum(s.seconds for s in finished))
    if finished:  # between two inner nodes
        return NodeRunState("running", len(finished), planned)
    for status in ("cancelled", "queued", "skipped"):
        if status in by:
            return NodeRunState(status)
    return NodeRunState()
