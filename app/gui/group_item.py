"""Groups (backdrops): a titled, coloured rectangle behind nodes that drags its nodes along.

Lives here: `GroupItem`. Imports Qt, `app.gui.theme`. The scene turns a finished drag into one move command
(group rect plus the nodes inside); double-clicking the title renames it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsSceneHoverEvent,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
    QWidget,
)

from app.gui import theme

if TYPE_CHECKING:
    from app.gui.node_item import NodeItem

TITLE_H = 30.0
GRIP = 16.0  # the bottom-right corner that resizes the group
GROUP_COLORS = ("#3f5e7a", "#5e3f7a", "#3f7a5e", "#7a5e3f", "#7a3f4a", "#555a63")


class GroupItem(QGraphicsItem):
    def __init__(self, index: int, group: dict[str, Any]) -> None:
        super().__init__()
        self.index = index
        self.title = str(group.get("title", "Group"))
        self.color = QColor(group.get("color", GROUP_COLORS[0]))
        x, y, w, h = (float(v) for v in group.get("rect", [0, 0, 300, 200]))
        self.size = (w, h)
        self.setPos(x, y)
        self.setZValue(-5)
        self.setFlags(
            QGraphicsItem.GraphicsItemFlag.ItemIsMovable
            | QGraphicsItem.GraphicsItemFlag.ItemIsSelectable
            | QGraphicsItem.GraphicsItemFlag.ItemSendsGeometryChanges
        )
        self.carried: list[tuple[NodeItem, QPointF]] = []
        self._drag_origin = QPointF()
        self._resizing = False
        self._grip_offset = (0.0, 0.0)
        self.setAcceptHoverEvents(True)
        self._font = QFont()
        self._font.setPointSizeF(12)
        self._font.setBold(True)

    def rect_list(self) -> list[float]:
        return [self.pos().x(), self.pos().y(), self.size[0], self.size[1]]

    def boundingRect(self) -> QRectF:
        return QRectF(0, 0, *self.size)

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fill = QColor(self.color)
        fill.setAlpha(70)
        painter.setBrush(fill)
        painter.setPen(QPen(QColor(theme.SELECTED) if self.isSelected() else self.color.lighter(120), 1.5))
        # Inside the bounding rect by half the pen: drawn on its edge, half the (orange, when selected)
        # border fell outside it and stayed behind as specks when the group was dragged.
        painter.drawRoundedRect(self.boundingRect().adjusted(1, 1, -1, -1), 8, 8)
        bar = QColor(self.color)
        bar.setAlpha(170)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(bar)
        painter.drawRoundedRect(QRectF(0, 0, self.size[0], TITLE_H), 8, 8)
        w, h = self.size
        painter.setPen(QPen(self.color.lighter(150), 1.5))
        for i in (4.0, 8.0, 12.0):  # resize grip
            painter.drawLine(QPointF(w - i, h - 3), QPointF(w - 3, h - i))
        painter.setPen(QColor(theme.TEXT))
        painter.setFont(self._font)
        painter.drawText(QRectF(12, 0, self.size[0] - 24, TITLE_H), Qt.AlignmentFlag.AlignVCenter, self.title)

    def _on_grip(self, pos: QPointF) -> bool:
        return pos.x() >= self.size[0] - GRIP and pos.y() >= self.size[1] - GRIP

    def hoverMoveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.setCursor(
            Qt.CursorShape.SizeFDiagCursor if self._on_grip(event.pos()) else Qt.CursorShape.ArrowCursor
        )

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self._resizing:
            self.prepareGeometryChange()
            dx, dy = self._grip_offset
            self.size = (max(120.0, event.pos().x() + dx), max(TITLE_H + 40, event.pos().y() + dy))
            self.update()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        self._resizing = False
        super().mouseReleaseEvent(event)

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self._on_grip(event.pos()):
            self._resizing = True
            self._grip_offset = (self.size[0] - event.pos().x(), self.size[1] - event.pos().y())
            self.carried = []
            event.accept()
            return
        scene = self.scene()
        area = self.sceneBoundingRect()
        self.carried = [
            (item, item.pos())
            for item in scene.node_items.values()  # type: ignore[attr-defined]
            if area.contains(item.sceneBoundingRect().center())
        ]
        self._drag_origin = self.pos()
        super().mousePressEvent(event)

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: Any) -> Any:
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged and self.carried:
            delta = self.pos() - self._drag_origin
            for item, start in self.carried:
                if not item.isSelected():
                    item.setPos(start + delta)
        return super().itemChange(change, value)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.pos().y() <= TITLE_H:
            self.scene().rename_group(self.index)  # type: ignore[attr-defined]
            event.accept()
        else:
            super().mouseDoubleClickEvent(event)
