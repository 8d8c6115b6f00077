"""A subgraph instance on the canvas: a node like any other (its ports are the definition's inputs and
outputs, its rows the promoted widgets) with a stacked look and an "Open subgraph" row at the bottom.

Lives here: `SubgraphNodeItem`, `BoundaryTag`. Imports Qt, `app.gui.node_item`, `app.gui.theme`.

A click on the row, or a double-click on the body, asks the scene to open the subgraph
(`GraphScene.subgraph_open_requested`); the window turns that into an undoable "Open subgraph" step.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSceneMouseEvent, QStyleOptionGraphicsItem, QWidget

from app.gui import theme
from app.gui.node_item import HEADER, PAD, ROW, WIDTH, NodeItem

STACK = 5.0  # how far the "cards behind" stick out: a subgraph reads as several nodes in one


class SubgraphNodeItem(NodeItem):
    def _build_ports(self) -> None:
        super()._build_ports()
        self.open_row = QRectF(10, self.height - PAD + 2, WIDTH - 20, ROW - 2)
        self.height += ROW

    def boundingRect(self) -> QRectF:
        return super().boundingRect().adjusted(0, 0, STACK, STACK)

    def inner_count(self) -> int:
        d = self.model.workflow.subgraphs.get(self.model.node(self.node_id).type, {})
        return len(d.get("nodes", {}))

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        behind = QPainterPath()
        behind.addRoundedRect(self.rect().translated(STACK, STACK), 7, 7)
        color = theme.category_color(self.spec.category) if self.spec else QColor(theme.NODE_BORDER)
        painter.fillPath(behind, QColor(color).darker(190))
        painter.setPen(QPen(QColor(color).darker(150), 1))
        painter.drawPath(behind)
        super().paint(painter, option, widget)
        if self.is_collapsed():
            return
        row = self.open_row
        pill = QPainterPath()
        pill.addRoundedRect(row, 4, 4)
        painter.fillPath(pill, QColor(theme.SELECTED).darker(260))
        painter.setPen(QPen(QColor(theme.SELECTED).darker(140), 1))
        painter.drawPath(pill)
        painter.setPen(QColor(theme.TEXT))
        painter.setFont(self._small)
        count = self.inner_count()
        painter.drawText(
            row, Qt.AlignmentFlag.AlignCenter, f"Open subgraph · {count} node{'s' if count != 1 else ''}  ›"
        )

    def _open(self) -> None:
        scene = self.scene()
        if scene is not None:
            scene.subgraph_open_requested.emit(self.node_id)  # type: ignore[attr-defined]

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if (
            event.button() == Qt.MouseButton.LeftButton
            and not self.is_collapsed()
            and self.open_row.contains(event.pos())
        ):
            event.accept()
            self._open()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.pos().y() > HEADER:  # the body: open it (the title bar still collapses, as on any node)
            event.accept()
            self._open()
            return
        super().mouseDoubleClickEvent(event)


class BoundaryTag(QGraphicsItem):
    """Inside an open subgraph: a tag beside an inner port wired to the subgraph node's port ("▶ clip" left of
    an input fed from outside, "positive ▶" right of an output that leaves), a child of the node so it moves
    with it. ComfyUI draws these as its input and output boundary nodes."""

    def __init__(self, node: NodeItem, port: str, direction: str, name: str) -> None:
        super().__init__(node)
        self.direction, self.text = direction, f"▶ {name}" if direction == "in" else f"{name} ▶"
        self.font = QFont()
        self.font.setPointSizeF(8)
        self.w = QFontMetrics(self.font).horizontalAdvance(self.text) + 14
        item = node.port(port, direction)
        self.color = QColor(item.color) if item is not None else QColor(theme.TEXT_DIM)
        y = item.y() if item is not None else HEADER / 2
        self.setPos(-self.w - 10 if direction == "in" else node.width + 10, y - 9)
        self.setToolTip(
            f"The subgraph node's input {name!r} comes in here"
            if direction == "in"
            else f"Leaves as the subgraph node's output {name!r}"
        )
        self.setZValue(2)

    def boundingRect(self) -> QRectF:
        return QRectF(-1, -1, self.w + 2, 20)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        box = QRectF(0, 0, self.w, 18)
        path = QPainterPath()
        path.addRoundedRect(box, 9, 9)
        painter.fillPath(path, QColor(20, 21, 25, 230))
        painter.setPen(QPen(self.color, 1.2))
        painter.drawPath(path)
        painter.setFont(self.font)
        painter.drawText(box, Qt.AlignmentFlag.AlignCenter, self.text)
