"""A subgraph instance on the canvas: a node like any other (its ports are the definition's inputs and
outputs, its rows the promoted widgets) with a stacked look and an "Open subgraph" row at the bottom.

Lives here: `SubgraphNodeItem`. Imports Qt, `app.gui.node_item`, `app.gui.theme`.

A click on the row, or a double-click on the body, asks the scene to open the subgraph
(`GraphScene.subgraph_open_requested`); the window turns that into an undoable "Open subgraph" step.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsSceneMouseEvent, QStyleOptionGraphicsItem, QWidget

from app.gui import theme
from app.gui.node_item import HEADER, PAD, ROW, WIDTH, NodeItem

STACK = 4.0  # how far the "cards behind" stick out: a subgraph reads as several nodes in one


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
        painter.fillPath(behind, QColor(theme.NODE_BODY).darker(130))
        painter.setPen(QPen(QColor(theme.NODE_BORDER), 1))
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
            row, Qt.AlignmentFlag.AlignCenter, f"⧉  Open subgraph · {count} node{'s' if count != 1 else ''}"
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
