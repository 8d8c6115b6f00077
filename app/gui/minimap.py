"""The minimap: a small overview of the whole graph with the visible area outlined; click or drag in it
to move the main view there.

Lives here: `Minimap`. Imports Qt, `app.gui.view`.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QWidget

from app.gui import theme
from app.gui.view import GraphView


class Minimap(QWidget):
    def __init__(self, view: GraphView) -> None:
        super().__init__(view)
        self.view = view
        self.setFixedSize(200, 130)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Overview: click to move the view")
        view.horizontalScrollBar().valueChanged.connect(self._changed)
        view.verticalScrollBar().valueChanged.connect(self._changed)
        view.graph_scene.changed.connect(self._changed)

    def _changed(self, *_args: object) -> None:
        self.update()

    def _world(self) -> QRectF:
        visible = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
        items = self.view.graph_scene.items_rect()
        return (items.united(visible) if not items.isNull() else visible).adjusted(-60, -60, 60, 60)

    def _transform(self) -> tuple[float, QPointF]:
        world = self._world()
        scale = min(self.width() / max(world.width(), 1), self.height() / max(world.height(), 1))
        offset = QPointF(
            (self.width() - world.width() * scale) / 2 - world.left() * scale,
            (self.height() - world.height() * scale) / 2 - world.top() * scale,
        )
        return scale, offset

    def paintEvent(self, event: QPaintEvent) -> None:
        if not self.view.graph_scene.node_items:
            return  # nothing to give an overview of
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(20, 21, 24, 220))
        painter.setPen(QPen(QColor(theme.NODE_BORDER), 1))
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))
        scale, offset = self._transform()

        def to_map(rect: QRectF) -> QRectF:
            return QRectF(
                rect.left() * scale + offset.x(),
                rect.top() * scale + offset.y(),
                rect.width() * scale,
                rect.height() * scale,
            )

        for group in self.view.graph_scene.group_items:
            color = QColor(group.color)
            color.setAlpha(90)
            painter.fillRect(to_map(group.sceneBoundingRect()), color)
        for item in self.view.graph_scene.node_items.values():
            color = (
                QColor(theme.SELECTED)
                if item.isSelected()
                else theme.category_color(item.spec.category if item.spec else "")
            )
            painter.fillRect(to_map(item.sceneBoundingRect()), color)
        visible = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
        painter.setPen(QPen(QColor("#ffffff"), 1.2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(to_map(visible))

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._jump(event.position())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton:
            self._jump(event.position())

    def _jump(self, pos: QPointF) -> None:
        scale, offset = self._transform()
        self.view.centerOn((pos.x() - offset.x()) / scale, (pos.y() - offset.y()) / scale)
        self.update()
