"""The canvas view: zoom with the wheel, pan with the middle button or space+drag, rubber-band select,
fit (F), and double-click on empty canvas to open the node palette.

Lives here: `GraphView`. Imports Qt, `app.gui.scene`.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QContextMenuEvent, QFont, QKeyEvent, QMouseEvent, QPainter, QWheelEvent
from PySide6.QtWidgets import QGraphicsView, QMenu, QWidget

from app.gui import theme
from app.gui.scene import GraphScene

MIN_ZOOM, MAX_ZOOM = 0.15, 3.0


EMPTY_HINT = (
    "Press Tab or double-click to add a node\n"
    "or open a workflow (Ctrl+O) — you can also drop a .json or a Nodeloom PNG here"
)


class GraphView(QGraphicsView):
    palette_requested = Signal(QPointF)  # scene position where a chosen node goes
    context_menu_requested = Signal(QMenu, QPointF)  # the window fills the menu for this scene position

    def __init__(self, scene: GraphScene, parent: QWidget | None = None) -> None:
        super().__init__(scene, parent)
        self.graph_scene = scene
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.RubberBandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.BoundingRectViewportUpdate)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setAcceptDrops(False)  # the main window takes dropped files
        self._panning = False
        self._space = False
        self.corner_overlay: QWidget | None = None  # the minimap: Fit Graph keeps nodes out from under it
        self._hint_drawn = False
        # The hint is painted over the whole viewport, but adding an item repaints only that item's rect:
        # the rest of the hint stayed on screen behind the new nodes. Repaint it all once it goes.
        scene.changed.connect(self._forget_hint)
        self._last = QPoint()

    def zoom(self) -> float:
        return self.transform().m11()

    def set_zoom(self, value: float) -> None:
        value = max(MIN_ZOOM, min(MAX_ZOOM, value))
        factor = value / self.zoom()
        self.scale(factor, factor)

    def wheelEvent(self, event: QWheelEvent) -> None:
        steps = event.angleDelta().y() / 120.0
        self.set_zoom(self.zoom() * (1.15**steps))

    def fit(self, rect: QRectF | None = None) -> None:
        rect = rect if rect is not None else self.graph_scene.items_rect()
        if rect.isNull():
            self.resetTransform()
            self.centerOn(0, 0)
            return
        self.fitInView(rect.adjusted(-40, -40, 40, 40), Qt.AspectRatioMode.KeepAspectRatio)
        if self.zoom() > 1.25:
            self.set_zoom(1.25)
        elif self.zoom() < MIN_ZOOM:
            self.set_zoom(MIN_ZOOM)
        self.centerOn(rect.center())
        # Leave the corner overlay (the minimap) free: zoom out a little until no node lies under it.
        for _ in range(12):
            if not self._under_overlay() or self.zoom() <= MIN_ZOOM:
                break
            self.set_zoom(max(MIN_ZOOM, self.zoom() * 0.9))
            self.centerOn(rect.center())

    def _under_overlay(self) -> bool:
        """Whether a node is drawn under `corner_overlay` (the minimap, a child widget of this view)."""
        overlay = self.corner_overlay
        if overlay is None or not overlay.isVisible():
            return False
        box = QRectF(overlay.geometry().translated(-self.viewport().pos())).adjusted(-8, -8, 8, 8)
        return any(
            self.mapFromScene(item.sceneBoundingRect()).boundingRect().intersects(box.toRect())
            for item in self.graph_scene.node_items.values()
        )

    def cursor_scene_pos(self) -> QPointF:
        local = self.mapFromGlobal(self.cursor().pos())
        if not self.viewport().rect().contains(local):
            return self.mapToScene(self.viewport().rect().center())
        return self.mapToScene(local)

    def view_state(self) -> dict[str, object]:
        center = self.mapToScene(self.viewport().rect().center())
        return {"center": [round(center.x(), 1), round(center.y(), 1)], "zoom": round(self.zoom(), 3)}

    def restore_view_state(self, state: dict[str, object]) -> bool:
        try:
            cx, cy = state["center"]  # type: ignore[misc]
            zoom = float(state["zoom"])  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            return False
        self.resetTransform()
        self.set_zoom(zoom)
        self.centerOn(float(cx), float(cy))
        return True

    # -- panning ----------------------------------------------------------------------------------

    def _start_pan(self, event: QMouseEvent) -> None:
        self._panning = True
        self._last = event.position().toPoint()
        self.setCursor(Qt.CursorShape.ClosedHandCursor)
        event.accept()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.MiddleButton or (
            self._space and event.button() == Qt.MouseButton.LeftButton
        ):
            self._start_pan(event)
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._panning:
            delta = event.position().toPoint() - self._last
            self._last = event.position().toPoint()
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - delta.x())
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() - delta.y())
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self._panning:
            self._panning = False
            self.setCursor(Qt.CursorShape.OpenHandCursor if self._space else Qt.CursorShape.ArrowCursor)
            event.accept()
            return
        super().mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if self.itemAt(event.position().toPoint()) is None:
            self.palette_requested.emit(self.mapToScene(event.position().toPoint()))
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space = True
            self.setCursor(Qt.CursorShape.OpenHandCursor)
            return
        if event.key() == Qt.Key.Key_Tab:
            self.palette_requested.emit(self.cursor_scene_pos())
            return
        arrows = {
            Qt.Key.Key_Left: (-1, 0),
            Qt.Key.Key_Right: (1, 0),
            Qt.Key.Key_Up: (0, -1),
            Qt.Key.Key_Down: (0, 1),
        }
        if event.key() in arrows and self.graph_scene.selected_node_ids():
            step = 100 if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else 20
            dx, dy = arrows[Qt.Key(event.key())]
            for node_id in self.graph_scene.selected_node_ids():
                self.graph_scene.node_items[node_id].moveBy(dx * step, dy * step)
            self.graph_scene.commit_moves()  # nudges in a row merge into one undo step
            return
        super().keyPressEvent(event)

    def keyReleaseEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Space and not event.isAutoRepeat():
            self._space = False
            self.setCursor(Qt.CursorShape.ArrowCursor)
            return
        super().keyReleaseEvent(event)

    def shows_hint(self) -> bool:
        """The empty-canvas hint is shown only while the scene has no item at all (nodes, groups, wires)."""
        return not self.graph_scene.items()

    def _forget_hint(self, *_args: object) -> None:
        if self._hint_drawn and not self.shows_hint():
            self._hint_drawn = False
            self.viewport().update()

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:
        super().drawForeground(painter, rect)
        self._hint_drawn = self.shows_hint()
        if not self._hint_drawn:
            return
        painter.save()
        painter.resetTransform()
        font = QFont(self.font())
        font.setPointSizeF(13)
        painter.setFont(font)
        painter.setPen(QColor(theme.TEXT_DIM))
        painter.drawText(self.viewport().rect(), Qt.AlignmentFlag.AlignCenter, EMPTY_HINT)
        painter.restore()

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = QMenu(self)
        self.context_menu_requested.emit(menu, self.mapToScene(event.pos()))
        if not menu.isEmpty():
            menu.exec(event.globalPos())

    def focusNextPrevChild(self, next: bool) -> bool:  # noqa: A002 - Qt's name
        return False  # Tab opens the palette instead of moving focus
