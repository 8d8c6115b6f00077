"""The editor scene: follows the graph model, draws nodes, wires and groups, and turns gestures into
undo commands (drag-to-connect with type checks, moves, deletes, copy/paste, groups, collapse, reroute dots
dropped on a wire).

Lives here: `GraphScene`. Imports Qt, `app.gui.*` items and commands, `nodes.graph_model`.
The scene never edits the model directly: it pushes a command; the model notifies; the scene updates.
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import QObject, QPointF, QRectF, Signal
from PySide6.QtGui import QColor, QPainter, QPen, QUndoStack
from PySide6.QtWidgets import QGraphicsScene, QGraphicsSceneMouseEvent, QInputDialog

from app.gui import theme
from app.gui.commands import (
    AddGroupCommand,
    AddNodeCommand,
    MoveCommand,
    PasteCommand,
    RemoveCommand,
    SetInputsCommand,
    SetNodeUiCommand,
    UpdateGroupCommand,
)
from app.gui.edge_item import EdgeItem
from app.gui.group_item import GROUP_COLORS, GroupItem
from app.gui.node_item import NodeItem, NodeRunState
from app.gui.port_item import PortItem
from app.gui.reroute_item import DOT_H, DOT_W, RerouteItem
from app.gui.subgraph_item import SubgraphNodeItem
from app.gui.wiring import WiringMixin
from nodes.graph_model import Connection, GraphModel
from nodes.reroute import REROUTE_TYPE, is_pass_through
from nodes.subgraph_spec import SUBGRAPH_CATEGORY
from nodes.workflow import Link

GRID = 20


class GraphScene(WiringMixin, QGraphicsScene):
    status_message = Signal(str)
    # A new wire dropped on empty canvas: (node, port, "out"|"in", type name, scene pos); the window offers
    # the palette filtered to nodes that can take it, and wires the chosen one.
    wire_dropped = Signal(str, str, str, str, QPointF)
    subgraph_open_requested = Signal(str)  # a subgraph instance's Open row or body double-clicked
    hidden_run_state = Signal(str)  # a run state for a node not on the canvas (inside a subgraph instance)

    def __init__(self, model: GraphModel, undo_stack: QUndoStack, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model, self.undo_stack = model, undo_stack
        self.node_items: dict[str, NodeItem] = {}
        self.edge_items: dict[Connection, EdgeItem] = {}
        self.group_items: list[GroupItem] = []
        self.run_states: dict[str, NodeRunState] = {}
        self.last_refusal = ""
        self._wire: EdgeItem | None = None
        self._wire_from: PortItem | None = None  # the fixed end of the loose wire
        self._detached: Connection | None = None  # the wire lifted off an input, while dragging it
        self.setBackgroundBrush(QColor(theme.CANVAS))
        self.setSceneRect(QRectF(-20000, -20000, 40000, 40000))
        for event, handler in (
            ("node_created", self._on_node_created),
            ("node_removed", self._on_node_removed),
            ("connection_created", self._on_connection_created),
            ("connection_removed", self._on_connection_removed),
            ("param_changed", self._on_param_changed),
            ("node_moved", self._on_node_moved),
            ("group_changed", self._on_group_changed),
            ("node_ui_changed", self._on_node_ui_changed),
            ("reset", self.rebuild),
        ):
            model.subscribe(event, handler)
        self.rebuild()

    # -- following the model ----------------------------------------------------------------------

    def rebuild(self) -> None:
        self._cancel_wire()
        self.clear()
        self.node_items.clear()
        self.edge_items.clear()
        self.group_items.clear()
        self.run_states.clear()
        for nid in self.model.node_ids():
            self._on_node_created(nid)
        for conn in self.model.connections():
            self._on_connection_created(conn)
        self._on_group_changed(None)

    def _on_node_created(self, node_id: str) -> None:
        spec = self.model.spec(node_id)
        kind = (
            RerouteItem
            if is_pass_through(spec)
            else SubgraphNodeItem
            if spec is not None and spec.category == SUBGRAPH_CATEGORY
            else NodeItem
        )
        item = kind(self.model, node_id)
        self.addItem(item)
        self.node_items[node_id] = item

    def _on_node_removed(self, node_id: str) -> None:
        item = self.node_items.pop(node_id)
        self.removeItem(item)
        self.run_states.pop(node_id, None)

    def _on_connection_created(self, conn: Connection) -> None:
        src, dst = self.node_items.get(conn.out_node), self.node_items.get(conn.in_node)
        if src is None or dst is None:
            return
        out_port, in_port = src.port(conn.out_port, "out"), dst.port(conn.in_port, "in")
        if out_port is None or in_port is None:
            return
        carried = self.model.output_type(conn.out_node, conn.out_port)  # through reroutes
        edge = EdgeItem(carried.color if carried is not None else out_port.port_type.color, conn)
        edge.set_ends(out_port.scenePos(), in_port.scenePos())
        self.addItem(edge)
        self.edge_items[conn] = edge
        in_port.connected = out_port.connected = True
        dst.update()
        in_port.update()
        self._refresh_reroutes()

    def _on_connection_removed(self, conn: Connection) -> None:
        edge = self.edge_items.pop(conn, None)
        if edge is not None:
            self.removeItem(edge)
        dst = self.node_items.get(conn.in_node)
        if dst is not None and (port := dst.port(conn.in_port, "in")) is not None:
            port.connected = False
            dst.update()
        src = self.node_items.get(conn.out_node)
        if src is not None and (port := src.port(conn.out_port, "out")) is not None:
            port.connected = any(
                c.out_node == conn.out_node and c.out_port == conn.out_port for c in self.edge_items
            )
            port.update()
        self._refresh_reroutes()

    def _refresh_reroutes(self) -> None:
        """A wire into a reroute changes the type it carries: recolour the dots and the wires leaving them."""
        reroutes = {nid: item for nid, item in self.node_items.items() if isinstance(item, RerouteItem)}
        if not reroutes:
            return
        for item in reroutes.values():
            item.refresh_type()
            item.refresh_tooltip()
        for conn, edge in self.edge_items.items():
            if conn.out_node in reroutes:
                edge.set_color(reroutes[conn.out_node].color())

    def _on_node_ui_changed(self, node_id: str, key: str) -> None:
        item = self.node_items.get(node_id)
        if item is None:
            return
        if key == "mode":
            item.update_mode()
        elif key in ("collapsed", "title"):
            item.apply_collapsed()

    def _on_param_changed(self, node_id: str, name: str, value: Any) -> None:
        self.node_items[node_id].update()

    def _on_node_moved(self, node_id: str, pos: tuple[float, float]) -> None:
        item = self.node_items[node_id]
        if (item.pos().x(), item.pos().y()) != pos:
            item.setPos(QPointF(*pos))

    def _on_group_changed(self, index: int | None) -> None:
        selected = {g.index for g in self.group_items if g.isSelected()}
        for item in self.group_items:
            self.removeItem(item)
        self.group_items = [GroupItem(i, g) for i, g in enumerate(self.model.groups())]
        for item in self.group_items:
            self.addItem(item)
            item.setSelected(item.index in selected and index is not None)

    def node_item_moved(self, item: NodeItem) -> None:
        for conn, edge in self.edge_items.items():
            if item.node_id in (conn.out_node, conn.in_node):
                src, dst = self.node_items[conn.out_node], self.node_items[conn.in_node]
                out_port, in_port = src.port(conn.out_port, "out"), dst.port(conn.in_port, "in")
                if out_port is not None and in_port is not None:
                    edge.set_ends(out_port.scenePos(), in_port.scenePos())

    def set_run_state(self, node_id: str, state: NodeRunState) -> None:
        self.run_states[node_id] = state
        if node_id in self.node_items:
            self.node_items[node_id].set_state(state)
        else:
            self.hidden_run_state.emit(node_id)

    def clear_run_states(self) -> None:
        for nid in list(self.run_states):
            self.set_run_state(nid, NodeRunState())

    # -- queries ----------------------------------------------------------------------------------

    def selected_node_ids(self) -> list[str]:
        return [i.node_id for i in self.selectedItems() if isinstance(i, NodeItem)]

    def selected_group_indices(self) -> list[int]:
        return [i.index for i in self.selectedItems() if isinstance(i, GroupItem)]

    def items_rect(self) -> QRectF:
        rect = QRectF()
        for item in list(self.node_items.values()) + list(self.group_items):
            rect = rect.united(item.sceneBoundingRect())
        return rect

    # -- moves ------------------------------------------------------------------------------------

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        self.commit_moves()

    def commit_moves(self) -> None:
        """Turn item positions that differ from the model into one move command."""
        nodes = {
            nid: (item.pos().x(), item.pos().y())
            for nid, item in self.node_items.items()
            if (item.pos().x(), item.pos().y()) != self.model.pos(nid)
        }
        groups = {
            g.index: g.rect_list()
            for g in self.group_items
            if g.rect_list() != [float(v) for v in self.model.groups()[g.index]["rect"]]
        }
        for g in self.group_items:
            g.carried = []
        if nodes or groups:
            self.undo_stack.push(MoveCommand(self.model, nodes, groups))

    # -- edits ------------------------------------------------------------------------------------

    def toggle_collapsed(self, node_ids: list[str]) -> None:
        """Collapse the nodes to their title bars, or expand them when all are collapsed: one undo step."""
        ids = [
            nid
            for nid in node_ids
            if nid in self.node_items and not isinstance(self.node_items[nid], RerouteItem)
        ]
        if not ids:
            self.status_message.emit("Select nodes or a group to collapse")
            return
        expand = all(self.node_items[nid].is_collapsed() for nid in ids)
        text = (
            f"{'Expand' if expand else 'Collapse'} {', '.join(ids) if len(ids) <= 3 else f'{len(ids)} nodes'}"
        )
        self.undo_stack.push(
            SetNodeUiCommand(self.model, "collapsed", {nid: None if expand else True for nid in ids}, text)
        )
        self.status_message.emit(text)

    def insert_reroute(self, conn: Connection, pos: QPointF) -> str | None:
        """Split a wire with a reroute dot centred at `pos`: one undo step."""
        if conn not in self.edge_items:
            return None
        self.undo_stack.beginMacro(f"Reroute {conn.out_node} → {conn.in_node}.{conn.in_port}")
        try:
            command = AddNodeCommand(self.model, REROUTE_TYPE, (pos.x() - DOT_W / 2, pos.y() - DOT_H / 2))
            self.undo_stack.push(command)
            dot = command.node_id
            assert dot is not None
            self.undo_stack.push(
                SetInputsCommand(
                    self.model,
                    {
                        (dot, "input"): Link(conn.out_node, conn.out_port),
                        (conn.in_node, conn.in_port): Link(dot, "output"),
                    },
                    "Wire through the reroute",
                )
            )
        finally:
            self.undo_stack.endMacro()
        self.clearSelection()
        self.node_items[dot].setSelected(True)
        self.status_message.emit(
            f"Added a reroute on {conn.out_node}.{conn.out_port} → {conn.in_node}.{conn.in_port}"
        )
        return dot

    def add_node(self, type_name: str, pos: QPointF) -> str:
        command = AddNodeCommand(
            self.model, type_name, (round(pos.x() / GRID) * GRID, round(pos.y() / GRID) * GRID)
        )
        self.undo_stack.push(command)
        assert command.node_id is not None
        self.clearSelection()
        self.node_items[command.node_id].setSelected(True)
        return command.node_id

    def add_node_wired(
        self, type_name: str, pos: QPointF, node_id: str, port: str, direction: str
    ) -> str | None:
        """Add a node where a loose wire was dropped and connect its first compatible port: one undo step."""
        self.undo_stack.beginMacro(f"Add {type_name} and connect")
        try:
            new = self.add_node(type_name, pos)
            spec = self.model.spec(new)
            candidates = (
                (
                    [i.name for i in spec.inputs] + [p.name for p in spec.params]
                    if direction == "out"
                    else [o.name for o in spec.outputs]
                )
                if spec
                else []
            )
            for name in candidates:
                args = (node_id, port, new, name) if direction == "out" else (new, name, node_id, port)
                if self.model.connection_possible(*args)[0]:
                    self.try_connect(*args)
                    break
        finally:
            self.undo_stack.endMacro()
        return new

    def delete_selected(self) -> None:
        nodes, groups = self.selected_node_ids(), self.selected_group_indices()
        wires = [
            (i.connection.in_node, i.connection.in_port)
            for i in self.selectedItems()
            if isinstance(i, EdgeItem) and i.connection is not None
        ]
        if nodes or groups or wires:
            self.undo_stack.push(RemoveCommand(self.model, nodes, groups, wires))

    def copy_selected(self) -> dict[str, Any] | None:
        nodes, groups = self.selected_node_ids(), self.selected_group_indices()
        return self.model.snapshot(nodes, groups) if nodes or groups else None

    def paste(self, snapshot: dict[str, Any], at: QPointF | None, text: str = "Paste") -> list[str]:
        positions = [n.get("pos", [0, 0]) for n in snapshot.get("ui", {}).get("nodes", {}).values()]
        if at is not None and positions:
            left, top = min(p[0] for p in positions), min(p[1] for p in positions)
            offset = (at.x() - left, at.y() - top)
        else:
            offset = (40.0, 40.0)
        command = PasteCommand(self.model, snapshot, offset, text)
        self.undo_stack.push(command)
        self.clearSelection()
        for nid in command.new_ids:
            self.node_items[nid].setSelected(True)
        return command.new_ids

    def group_selection(self, title: str = "Group") -> None:
        rect = QRectF()
        for nid in self.selected_node_ids():
            rect = rect.united(self.node_items[nid].sceneBoundingRect())
        if rect.isNull():
            self.status_message.emit("Select some nodes to group them")
            return
        rect = rect.adjusted(-20, -50, 20, 20)
        color = GROUP_COLORS[len(self.model.groups()) % len(GROUP_COLORS)]
        self.undo_stack.push(
            AddGroupCommand(self.model, title, [rect.x(), rect.y(), rect.width(), rect.height()], color)
        )

    def rename_group(self, index: int) -> None:
        views = self.views()
        title, ok = QInputDialog.getText(
            views[0] if views else None,
            "Rename group",
            "Title:",
            text=str(self.model.groups()[index].get("title", "")),
        )
        if ok and title:
            self.undo_stack.push(UpdateGroupCommand(self.model, index, title=title))

    # -- background -------------------------------------------------------------------------------

    def drawBackground(self, painter: QPainter, rect: QRectF) -> None:
        super().drawBackground(painter, rect)
        scale = painter.worldTransform().m11()
        if scale < 0.35:
            return
        left, top = int(math.floor(rect.left() / GRID)) * GRID, int(math.floor(rect.top() / GRID)) * GRID
        minor, major = QPen(QColor(theme.GRID_MINOR), 0), QPen(QColor(theme.GRID_MAJOR), 0)
        x = left
        while x < rect.right():
            painter.setPen(major if x % (GRID * 5) == 0 else minor)
            painter.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))
            x += GRID
        y = top
        while y < rect.bottom():
            painter.setPen(major if y % (GRID * 5) == 0 else minor)
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            y += GRID
