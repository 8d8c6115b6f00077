"""Wires: bezier curves coloured by the type they carry, and the loose wire shown while dragging.
Double-clicking a wire drops a reroute dot on it (`GraphScene.insert_reroute`).

Lives here: `EdgeItem`, `wire_path`. Imports Qt, `nodes.graph_model`.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPainterPathStroker, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsSceneMouseEvent,
    QStyle,
    QStyleOptionGraphicsItem,
    QWidget,
)

from nodes.graph_model import Connection


def wire_path(start: QPointF, end: QPointF) -> QPainterPath:
    """A horizontal S-curve from an output (left) to an input (right)."""
    dx = max(abs(end.x() - start.x()) * 0.5, 60.0)
    path = QPainterPath(start)
    path.cubicTo(QPointF(start.x() + dx, start.y()), QPointF(end.x() - dx, end.y()), end)
    return path


class EdgeItem(QGraphicsPathItem):
    """A wire between two ports; `connection` is None for the loose wire being dragged."""

    def __init__(self, color: str, connection: Connection | None = None) -> None:
        super().__init__()
        self.connection = connection
        self.color = QColor(color)
        self.setZValue(0 if connection else 3)
        self.setPen(
            QPen(
                self.color,
                2.6,
                Qt.PenStyle.SolidLine if connection else Qt.PenStyle.DashLine,
                Qt.PenCapStyle.RoundCap,
            )
        )
        if connection is not None:
            self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
            self.setToolTip(
                f"{connection.out_node}.{connection.out_port} → {connection.in_node}.{connection.in_port}"
            )

    def set_ends(self, start: QPointF, end: QPointF) -> None:
        self.setPath(wire_path(start, end))

    def set_color(self, color: str | QColor) -> None:
        self.color = QColor(color)
        pen = QPen(self.pen())
        pen.setColor(self.color)
        self.setPen(pen)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        """Double-click on a wire: drop a reroute dot there, splitting the wire."""
        if self.connection is not None and self.scene() is not None:
            event.accept()
            self.scene().insert_reroute(self.connection, event.scenePos())  # type: ignore[attr-defined]
            return
        super().mouseDoubleClickEvent(event)

    def shape(self) -> QPainterPath:
        stroker = QPainterPathStroker()
        stroker.setWidth(10)
        return stroker.createStroke(self.path())

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(self.pen())
        if option.state & QStyle.StateFlag.State_Selected:  # type: ignore[operator]
            pen.setColor(self.color.lighter(150))
            pen.setWidthF(4)
        painter.setPen(pen)
        painter.drawPath(self.path())

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: Any) -> Any:
        return super().itemChange(change, value)
