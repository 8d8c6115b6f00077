"""A node on the canvas: header with title and category colour, typed ports, compact parameter values and
the run state (queued, running with a progress bar in the header, cached, done with seconds, error).
A collapsed node (`ui.nodes.<id>.collapsed`) shows its title bar only; its wires meet the title bar's ends.

A Save or Preview node shows its last picture under its rows (`set_thumbnail`, app.gui.node_thumbnail).

Lives here: `NodeItem`, `NodeRunState`. Imports Qt, `app.gui.port_item`, `app.gui.node_thumbnail`,
`app.gui.theme`, `nodes`.
Values are edited in the inspector dock; the node only displays them (cheap for big graphs, see FINDINGS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSceneMouseEvent, QStyleOptionGraphicsItem, QWidget

from app.gui import theme
from app.gui.node_thumbnail import THUMB_H, paint_thumbnail
from app.gui.plan_view import paint_plan_bar, plan_tooltip
from app.gui.port_item import PortItem
from nodes.spec import NodeSpec, Param

if TYPE_CHECKING:
    from nodes.graph_model import GraphModel

WIDTH = 220.0
HEADER = 28.0
ROW = 22.0
PAD = 8.0
ARROW = 20.0  # the collapse arrow at the left of the title bar
MIN_COLLAPSED = 110.0
BORDER = 3.0  # paint margin around the body
# Behind the header badge, so its colour reads on any header colour (a bypassed node's is purple).
BADGE_BACKGROUND = QColor(16, 16, 20, 220)


@dataclass
class NodeRunState:
    status: str = ""  # "" | queued | running | cached | done | error | cancelled | skipped | warning
    step: int = 0
    total: int = 0
    seconds: float = 0.0
    message: str = ""


def format_value(param: Param, value: Any) -> str:
    """The value painted on the node: the parameter's kind says how (nodes.kinds); -0.0 reads as 0, and a
    size left at 0 reads "model size", as in the inspector."""
    if param.zero_is_native_size and value == 0:
        return "model size"
    if isinstance(value, float) and value == 0:
        value = 0.0
    return param.show(value)


class NodeItem(QGraphicsItem):
    def __init__(self, model: GraphModel, node_id: str) -> None:
        super().__init__()
        self.model, self.node_id = model, node_id
        self.spec: NodeSpec | None = model.spec(node_id)
        self.state = NodeRunState()
        self.thumbnail: QImage | None = None  # a Save/Preview node's last picture
        self.plan: tuple[int, int] | None = None  # (predicted device peak, budget) from the memory plan
        self.inputs: dict[str, PortItem] = {}
        self.outputs: dict[str, PortItem] = {}
        self.width = WIDTH
        self.height = HEADER
        self._expanded_height = HEADER
        self._port_pos: dict[PortItem, QPointF] = {}  # where each port sits when the node is expanded
        self.setFlags(
            QGraphicsItem.GraphicsItemFlag.ItemIsMovable
            | QGraphicsItem.GraphicsItemFlag.ItemIsSelectable
            | QGraphicsItem.GraphicsItemFlag.ItemSendsGeometryChanges
        )
        self.setZValue(1)
        self._title_font = QFont()
        self._title_font.setBold(True)
        self._title_font.setPointSizeF(9.5)
        self._small = QFont()
        self._small.setPointSizeF(8.5)
        self._build_ports()
        self._port_pos = {port: port.pos() for port in [*self.inputs.values(), *self.outputs.values()]}
        self._expanded_height = self.height
        self.setPos(QPointF(*model.pos(node_id)))
        self.refresh_tooltip()
        self.update_mode()
        self.apply_collapsed()

    # -- layout -----------------------------------------------------------------------------------

    def _build_ports(self) -> None:
        spec = self.spec
        if spec is None:
            self.height = HEADER + ROW + PAD
            return
        rows = max(len(spec.inputs), len(spec.outputs))
        for i, inp in enumerate(spec.inputs):
            self.inputs[inp.name] = PortItem(self, self.node_id, inp.name, "in", inp.type)
            self.inputs[inp.name].setPos(0, HEADER + ROW * (i + 0.5) + 4)
        for i, out in enumerate(spec.outputs):
            self.outputs[out.name] = PortItem(self, self.node_id, out.name, "out", out.type)
            self.outputs[out.name].setPos(WIDTH, HEADER + ROW * (i + 0.5) + 4)
        top = HEADER + ROW * rows + 4 + (4 if rows else 0)
        self.param_top = top
        for i, param in enumerate(spec.params):
            port = PortItem(self, self.node_id, param.name, "in", param.kind.port_type, is_param=True)
            port.setPos(0, top + ROW * (i + 0.5))
            self.inputs[param.name] = port
        self.height = top + ROW * len(spec.params) + PAD

    def boundingRect(self) -> QRectF:
        # The border pen (up to 2.5 px, half outside the body) plus a pixel of antialiasing.
        return QRectF(-BORDER, -BORDER, self.width + 2 * BORDER, self.height + 2 * BORDER)

    def rect(self) -> QRectF:
        return QRectF(0, 0, self.width, self.height)

    def is_collapsed(self) -> bool:
        return bool(self.model.node_ui(self.node_id, "collapsed"))

    def apply_collapsed(self) -> None:
        """Lay the node out for its saved collapsed state: a title bar whose ends take every wire, or all rows."""
        self.prepareGeometryChange()
        collapsed = self.is_collapsed()
        if collapsed:
            # Room for the title and a run badge ("✓ 0.42 s"), so the bar keeps its width while it runs.
            text = QFontMetrics(self._title_font).horizontalAdvance(self.title())
            self.width = max(MIN_COLLAPSED, min(WIDTH, ARROW + text + 80))
            self.height = HEADER
        else:
            self.width, self.height = (
                WIDTH,
                self._expanded_height + (THUMB_H if self.thumbnail is not None else 0),
            )
        for port, pos in self._port_pos.items():
            port.setVisible(not collapsed)
            if collapsed:
                port.setPos(0 if port.direction == "in" else self.width, HEADER / 2)
            else:
                port.setPos(pos)
        self.update()
        if self.scene() is not None:
            self.scene().node_item_moved(self)  # type: ignore[attr-defined]

    def port(self, name: str, direction: str) -> PortItem | None:
        return (self.inputs if direction == "in" else self.outputs).get(name)

    # -- state ------------------------------------------------------------------------------------

    def title(self) -> str:
        """The title on the canvas: the user's own (ui.nodes.<id>.title), else the type's."""
        custom = self.model.workflow.ui.get("nodes", {}).get(self.node_id, {}).get("title")
        if custom:
            return str(custom)
        return self.spec.title if self.spec else self.model.node(self.node_id).type

    def mode(self) -> str:
        return str(self.model.workflow.ui.get("nodes", {}).get(self.node_id, {}).get("mode", "normal"))

    def update_mode(self) -> None:
        self.setOpacity(0.45 if self.mode() == "mute" else 1.0)
        self.update()

    def set_thumbnail(self, image: QImage | None) -> None:
        """Show `image` under the node's rows (None: take it away); the node grows to make room."""
        self.thumbnail = image
        self.apply_collapsed()  # lays the node out again at its new height

    def set_state(self, state: NodeRunState) -> None:
        self.state = state
        self.refresh_tooltip()
        self.update()

    def refresh_tooltip(self) -> None:
        title = self.spec.title if self.spec else "unknown node type"
        lines = [f"<b>{title}</b> <i>({self.node_id})</i>"]
        if self.spec is not None and self.spec.description:
            lines.append(self.spec.description)
        if self.state.status == "error":
            lines.append(f"<span style='color:{theme.ERROR}'>Error: {self.state.message}</span>")
        elif self.state.status == "warning":
            lines.append(f"<span style='color:{theme.WARNING}'>Imported: {self.state.message}</span>")
        elif self.state.status == "done":
            lines.append(f"Ran in {self.state.seconds:.2f} s")
        elif self.state.status == "cached":
            lines.append("Result reused from the cache")
        elif self.state.status == "skipped":
            lines.append("Skipped in the last run: no output node needs it (as in ComfyUI)")
        if self.plan is not None:
            lines.append(plan_tooltip(*self.plan))
        self.setToolTip("<br>".join(lines))

    def badge(self) -> tuple[str, QColor]:
        """The header badge's text and colour (drawn on BADGE_BACKGROUND)."""
        text, color = self._badge()
        return text, color.lighter(130) if self.mode() != "bypass" else color

    def _badge(self) -> tuple[str, QColor]:
        s = self.state
        if self.mode() == "bypass":
            return "bypassed", QColor(theme.BYPASS).lighter(160)
        if self.mode() == "mute":
            return "muted", QColor(theme.TEXT_DIM)
        if s.status == "running":
            # The message is the progress's own wording ("loading unet 0.8/3.2 GiB", "converting GGUF 40%").
            return (s.message or (f"{s.step}/{s.total}" if s.total else "running…")), QColor(theme.RUNNING)
        if s.status == "done":
            return f"✓ {s.seconds:.2f} s", QColor(theme.DONE)
        if s.status == "cached":
            return "cached", QColor(theme.CACHED)
        if s.status == "queued":
            return "queued", QColor(theme.QUEUED)
        if s.status == "error":
            return "✕ error", QColor(theme.ERROR)
        if s.status == "cancelled":
            return "cancelled", QColor(theme.TEXT_DIM)
        if s.status == "skipped":
            return "skipped", QColor(theme.TEXT_DIM)
        if s.status == "warning":  # an import note: what differs from ComfyUI (app/gui/import_report.py)
            return "≈ differs", QColor(theme.WARNING)
        return "", QColor(theme.TEXT_DIM)

    # -- painting ---------------------------------------------------------------------------------

    def paint(
        self, painter: QPainter, option: QStyleOptionGraphicsItem, widget: QWidget | None = None
    ) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = self.rect()
        body = QPainterPath()
        body.addRoundedRect(rect, 7, 7)
        painter.fillPath(body, QColor(theme.NODE_BODY))
        color = theme.category_color(self.spec.category) if self.spec else QColor(theme.ERROR)
        painter.save()
        painter.setClipPath(body)
        painter.fillRect(QRectF(0, 0, self.width, HEADER), color)
        s = self.state
        if s.status == "running" and s.total:
            frac = min(1.0, s.step / s.total)
            painter.fillRect(QRectF(0, HEADER - 4, self.width * frac, 4), QColor(theme.RUNNING))
        elif s.status == "running":
            painter.fillRect(QRectF(0, HEADER - 4, self.width, 4), QColor(theme.RUNNING).darker(150))
        painter.restore()
        self._paint_arrow(painter)
        # Title and badge.
        badge, badge_color = self.badge()
        painter.setFont(self._small)
        # A long progress badge ("loading text_encoder_2 0.6/1.6 GiB") leaves the title room: it loses its
        # start, not the figures (the status bar has it whole).
        badge = QFontMetrics(self._small).elidedText(badge, Qt.TextElideMode.ElideLeft, int(WIDTH * 0.58))
        badge_w = QFontMetrics(self._small).horizontalAdvance(badge) + 10 if badge else 0
        if badge:
            # A dark pill behind the badge: its colour is readable on every header (purple on a bypassed
            # node's purple header was not).
            box = QRectF(self.width - badge_w - 6, 4, badge_w, HEADER - 10)
            pill = QPainterPath()
            pill.addRoundedRect(box.adjusted(0, 0, 2, 0), 4, 4)
            painter.fillPath(pill, BADGE_BACKGROUND)
            painter.setPen(badge_color)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, badge)
        painter.setPen(QColor(theme.TEXT))
        title = self.title()
        room = int(self.width - badge_w - ARROW - 8)
        font = self._title_font
        if QFontMetrics(font).horizontalAdvance(title) > room:  # a long title: a size smaller before eliding
            font = QFont(self._title_font)
            font.setPointSizeF(8.5)
        painter.setFont(font)
        title = QFontMetrics(font).elidedText(title, Qt.TextElideMode.ElideRight, room)
        painter.drawText(QRectF(ARROW, 0, self.width, HEADER - 2), Qt.AlignmentFlag.AlignVCenter, title)
        if self.is_collapsed():
            self._paint_wire_ends(painter)
        else:
            self._paint_rows(painter)
            if self.thumbnail is not None:
                paint_thumbnail(painter, self._expanded_height - 4, self.width, self.thumbnail)
            paint_plan_bar(painter, self)
        if self.mode() == "bypass":  # a purple veil: the node is passed through
            veil = QColor(theme.BYPASS)
            veil.setAlpha(85)
            painter.fillPath(body, veil)
        # Border: selection, error, running.
        if s.status == "error":
            pen = QPen(QColor(theme.ERROR), 2.5)
        elif self.isSelected():
            pen = QPen(QColor(theme.SELECTED), 2)
        elif s.status == "running":
            pen = QPen(QColor(theme.RUNNING), 2)
        else:
            pen = QPen(QColor(theme.NODE_BORDER), 1)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(body)

    def _paint_arrow(self, painter: QPainter) -> None:
        """A small triangle left of the title: pointing right when collapsed, down when expanded."""
        cx, cy = ARROW / 2 + 1, HEADER / 2 - 1
        if self.is_collapsed():
            points = [QPointF(cx - 3, cy - 5), QPointF(cx + 4, cy), QPointF(cx - 3, cy + 5)]
        else:
            points = [QPointF(cx - 5, cy - 3), QPointF(cx + 5, cy - 3), QPointF(cx, cy + 4)]
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(theme.TEXT))
        painter.drawPolygon(points)

    def _paint_wire_ends(self, painter: QPainter) -> None:
        """A collapsed node: a dot at each end of the title bar where wires arrive or leave."""
        for ports, x in ((self.inputs, 0.0), (self.outputs, self.width)):
            wired = [p for p in ports.values() if p.connected]
            if wired:
                painter.setPen(QPen(QColor(theme.NODE_BORDER), 1))
                painter.setBrush(QColor(wired[0].color))
                painter.drawEllipse(QPointF(x, HEADER / 2), 4.5, 4.5)

    def _paint_rows(self, painter: QPainter) -> None:
        spec = self.spec
        if spec is None:
            painter.setPen(QColor(theme.ERROR))
            painter.drawText(
                QRectF(PAD, HEADER, WIDTH - 2 * PAD, ROW), Qt.AlignmentFlag.AlignVCenter, "unknown node type"
            )
            return
        painter.setFont(self._small)
        fm = QFontMetrics(self._small)
        node = self.model.node(self.node_id)
        for name, port in self.inputs.items():
            if port.is_param:
                continue
            painter.setPen(QColor(theme.TEXT))
            painter.drawText(
                QRectF(14, port.y() - ROW / 2, WIDTH / 2 - 14, ROW), Qt.AlignmentFlag.AlignVCenter, name
            )
        for name, port in self.outputs.items():
            painter.setPen(QColor(theme.TEXT))
            painter.drawText(
                QRectF(WIDTH / 2, port.y() - ROW / 2, WIDTH / 2 - 14, ROW),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight,
                name,
            )
        for param in spec.params:
            port = self.inputs[param.name]
            y = port.y() - ROW / 2 + 2
            row = QRectF(10, y, WIDTH - 20, ROW - 4)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor("#2a2c31"))
            painter.drawRoundedRect(row, 4, 4)
            painter.setPen(QColor(theme.TEXT_DIM))
            label_w = min(fm.horizontalAdvance(param.name) + 8, 100)
            painter.drawText(row.adjusted(6, 0, 0, 0), Qt.AlignmentFlag.AlignVCenter, param.name)
            wired = param.name in node.inputs
            value = "← wired" if wired else format_value(param, node.params.get(param.name))
            painter.setPen(QColor(theme.TEXT_DIM if wired else theme.TEXT))
            value = fm.elidedText(value, Qt.TextElideMode.ElideRight, int(row.width() - label_w - 14))
            painter.drawText(
                row.adjusted(0, 0, -6, 0), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, value
            )

    # -- gestures ---------------------------------------------------------------------------------

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and QRectF(0, 0, ARROW + 2, HEADER).contains(
            event.pos()
        ):
            event.accept()  # the arrow: collapse or expand, as ComfyUI's dot does
            self.scene().toggle_collapsed([self.node_id])  # type: ignore[attr-defined]
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if event.pos().y() <= HEADER:  # double-click on the title bar: collapse or expand
            event.accept()
            if event.pos().x() <= ARROW + 2:
                return  # the arrow already toggled on the press
            self.scene().toggle_collapsed([self.node_id])  # type: ignore[attr-defined]
            return
        super().mouseDoubleClickEvent(event)

    # -- movement ---------------------------------------------------------------------------------

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value: Any) -> Any:
        if change == QGraphicsItem.GraphicsItemChange.ItemPositionHasChanged and self.scene() is not None:
            self.scene().node_item_moved(self)  # type: ignore[attr-defined]
        return super().itemChange(change, value)
