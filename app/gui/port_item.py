"""A port: the coloured dot a wire starts or ends on.

Lives here: `PortItem`. Imports Qt, `nodes.types`. A press on a port starts a wire drag in the scene; the
event is accepted so the view does not start a rubber band (see FINDINGS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsSceneHoverEvent,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
    QWidget,
)

from nodes.types import PortType

if TYPE_CHECKING:
    from app.gui.scene import GraphScene


class PortItem(QGraphicsItem):
    """One input or output of a node. `is_param` marks a parameter that can also take a wire."""

    def __init__(
        self,
        parent: QGraphicsItem,
        node_id: str,
        name: str,
        direction: str,
        port_type: PortType,
        *,
        is_param: bool = False,
    ) -> None:
        super().__init__(parent)
        self.node_id, self.name, self.direction, self.port_type = node_id, name, direction, port_type
        self.is_param = is_param
        self.radius = 4.5 if is_param else 6.0
        self.color = QColor(port_type.color)
        self.connected = False
        self.hovered = False
        self.highlight: str | None = None  # "ok" | "no" while a wire is being dragged
        self.setAcceptHoverEvents(True)
        self.setCursor(Qt.CursorShape.CrossCursor)
        self.setToolTip(f"{name}: {port_type.name}")
        self.setZValue(2)

    def boundingRect(self) -> QRectF:
        r = self.radius + 5
        return QRectF(-r, -r, 2 * r, 2 * r)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = self.radius
        if self.highlight == "ok" or self.hovered:
            painter.setPen(QPen(QColor("#ffffff"), 2))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawEllipse(QPointF(0, 0), r + 3.5, r + 3.5)
        color = QColor(self.color)
        if self.highlight == "no":
            color.setAlpha(60)
        painter.setPen(QPen(color.darker(160), 1.5))
        painter.setBrush(
            QBrush(color)
            if (self.connected or not self.is_param or self.highlight == "ok")
            else QBrush(QColor("#2a2b30"))
        )
        painter.drawEllipse(QPointF(0, 0), r, r)

    def graph_scene(self) -> GraphScene:
        return self.scene()  # type: ignore[return-value]

    def hoverEnterEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.hovered = True
        self.update()

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.hovered = False
        self.update()

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            event.accept()
            self.graph_scene().begin_wire(self, event.scenePos())
        else:
            event.ignore()

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        self.graph_scene().drag_wire(event.scenePos())

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        self.graph_scene().end_wire(event.scenePos())
