"""A Reroute on the canvas: a small dot on a wire, in the colour of the type it carries, dragged like a node.

Lives here: `RerouteItem`, `DOT_W`, `DOT_H`. Imports Qt, `app.gui.node_item`, `app.gui.port_item`, `app.gui.theme`.
The node's position is the top-left of a small box; the wire in arrives at its left end, the wire out leaves
its right end, and the dot sits between them. Its colour follows `GraphModel.output_type` (what feeds it).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QGraphicsSceneMouseEvent, QStyleOptionGraphicsItem, QWidget

from app.gui import theme
from app.gui.node_item import NodeItem
from app.gui.port_item import PortItem

DOT_W, DOT_H = 36.0, 20.0
DOT_R = 7.0


class RerouteItem(NodeItem):
    def _build_ports(self) -> None:
        spec = self.spec
        assert spec is not None
        inp, out = spec.inputs[0], spec.outputs[0]
        self.inputs[inp.name] = PortItem(self, self.node_id, inp.name, "in", inp.type)
        self.outputs[out.name] = PortItem(self, self.node_id, out.name, "out", out.type)
        for port, x in ((self.inputs[inp.name], 0.0), (self.outputs[out.name], DOT_W)):
            port.radius = 3.5
            port.setPos(x, DOT_H / 2)
        self.width, self.height = DOT_W, DOT_H
        self.refresh_type()

    def is_collapsed(self) -> bool:
        return False  # already as small as it gets

    def apply_collapsed(self) -> None:
        self.width, self.height = DOT_W, DOT_H

    def color(self) -> QColor:
        carried = self.model.output_type(self.node_id, self.spec.outputs[0].name) if self.spec else None
        return QColor(carried.color if carried is not None else theme.TEXT_DIM)

    def refresh_type(self) -> None:
        """Recolour the dot and its ports for the type that now flows through it."""
        assert self.spec is not None
        carried = self.model.output_type(self.node_id, self.spec.outputs[0].name)
        for port in (*self.inputs.values(), *self.outputs.values()):
            port.color = self.color()
            port.setToolTip(f"{port.name}: {carried.name if carried else 'ANY'}")
        self.update()

    def refresh_tooltip(self) -> None:
        carried = self.model.output_type(self.node_id, "output") if self.spec else None
        what = carried.name if carried is not None and carried.name != "ANY" else "nothing yet"
        self.setToolTip(f"<b>Reroute</b> <i>({self.node_id})</i><br>Carries {what}; drag to move")

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        color = self.color()
        mid = QPointF(DOT_W / 2, DOT_H / 2)
        painter.setPen(QPen(color, 2.6, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawLine(QPointF(0, DOT_H / 2), QPointF(DOT_W, DOT_H / 2))  # the wire goes on through
        if self.isSelected():
            painter.setPen(QPen(QColor(theme.SELECTED), 2))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawEllipse(mid, DOT_R + 3.5, DOT_R + 3.5)
        painter.setPen(QPen(color.darker(170), 1.5))
        painter.setBrush(color if self.mode() != "bypass" else QColor(theme.BYPASS))
        painter.drawEllipse(mid, DOT_R, DOT_R)

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super(NodeItem, self).mousePressEvent(event)  # no title bar, no collapse arrow: press drags

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        event.accept()

    def boundingRect(self) -> QRectF:
        # The selection ring (radius DOT_R + 3.5, 2 px pen) reaches 1.5 px past the top and bottom: the
        # old 2 px margin left antialiased orange specks behind a dragged dot.
        ring = DOT_R + 3.5 + 1 + 1.5  # radius, half the pen, antialiasing
        top = min(-2.0, DOT_H / 2 - ring)
        return QRectF(-2, top, DOT_W + 4, DOT_H - 2 * top)
