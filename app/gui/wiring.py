"""Drag-to-connect on the editor scene: lifting a wire, highlighting the ports that take it, dropping it on
a port, on a node's body (its first free port that fits) or on empty canvas (the palette, filtered), and
saying why at the cursor when nothing fits.

Lives here: `WiringMixin`, mixed into `GraphScene` (app/gui/scene.py), whose model, undo stack, items and
signals it uses. Imports Qt, `app.gui` items and commands, `nodes.graph_model`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QTransform

from app.gui.commands import SetInputsCommand
from app.gui.edge_item import EdgeItem
from app.gui.node_item import NodeItem
from app.gui.port_item import PortItem
from nodes.graph_model import Connection
from nodes.workflow import Link

if TYPE_CHECKING:
    from app.gui.scene import GraphScene


class WiringMixin:
    def _port_at(self: GraphScene, pos: QPointF) -> PortItem | None:
        near = self.items(QRectF(pos.x() - 9, pos.y() - 9, 18, 18))
        ports = [i for i in near if isinstance(i, PortItem)]
        return min(
            ports,
            key=lambda p: math.dist((p.scenePos().x(), p.scenePos().y()), (pos.x(), pos.y())),
            default=None,
        )

    # -- wiring -----------------------------------------------------------------------------------

    def try_connect(
        self: GraphScene,
        out_node: str,
        out_port: str,
        in_node: str,
        in_port: str,
        detached: Connection | None = None,
    ) -> tuple[bool, str]:
        """Draw a wire as a drop would: push the command, or refuse and say why in the status bar."""
        ok, reason = self.model.connection_possible(out_node, out_port, in_node, in_port)
        if not ok:
            self.last_refusal = reason
            self.status_message.emit(f"Can't connect: {reason}")
            return False, reason
        changes: dict[tuple[str, str], Link | None] = {}
        if detached is not None and (detached.in_node, detached.in_port) != (in_node, in_port):
            changes[(detached.in_node, detached.in_port)] = None
        changes[(in_node, in_port)] = Link(out_node, out_port)
        self.undo_stack.push(
            SetInputsCommand(self.model, changes, f"Connect {out_node} → {in_node}.{in_port}")
        )
        self.status_message.emit(f"Connected {out_node}.{out_port} → {in_node}.{in_port}")
        return True, ""

    def begin_wire(self: GraphScene, port: PortItem, pos: QPointF) -> None:
        self._detached = None
        if port.direction == "in":
            link = self.model.input_link(port.node_id, port.name)
            if link is not None:  # lift the wire off this input: reconnect or drop it elsewhere
                self._detached = Connection(link.node, link.output, port.node_id, port.name)
                port = self.node_items[link.node].port(link.output, "out") or port
                if self._detached in self.edge_items:
                    self.edge_items[self._detached].setVisible(False)
        self._wire_from = port
        self._wire = EdgeItem(port.port_type.color)
        self.addItem(self._wire)
        self._highlight_candidates(port)
        self.drag_wire(pos)

    def _highlight_candidates(self: GraphScene, origin: PortItem) -> None:
        for item in self.node_items.values():
            for candidate in list(item.inputs.values()) + list(item.outputs.values()):
                if candidate.direction == origin.direction:
                    candidate.highlight = "no"
                elif origin.direction == "out":
                    ok = self.model.connection_possible(
                        origin.node_id, origin.name, candidate.node_id, candidate.name
                    )[0]
                    candidate.highlight = "ok" if ok else "no"
                else:
                    ok = self.model.connection_possible(
                        candidate.node_id, candidate.name, origin.node_id, origin.name
                    )[0]
                    candidate.highlight = "ok" if ok else "no"
                candidate.update()

    def drag_wire(self: GraphScene, pos: QPointF) -> None:
        if self._wire is None or self._wire_from is None:
            return
        start = self._wire_from.scenePos()
        if self._wire_from.direction == "out":
            self._wire.set_ends(start, pos)
        else:
            self._wire.set_ends(pos, start)

    def end_wire(self: GraphScene, pos: QPointF) -> None:
        origin, detached = self._wire_from, self._detached
        self._cancel_wire()
        if origin is None:
            return
        target = self._port_at(pos) or self._port_on_node_at(pos, origin)
        if target is None:
            if detached is not None:
                self.undo_stack.push(
                    SetInputsCommand(
                        self.model,
                        {(detached.in_node, detached.in_port): None},
                        f"Disconnect {detached.in_node}.{detached.in_port}",
                    )
                )
                self.status_message.emit(f"Disconnected {detached.in_node}.{detached.in_port}")
            elif origin.scenePos() != pos and not self.itemAt(
                pos, self.views()[0].transform() if self.views() else QTransform()
            ):
                self.wire_dropped.emit(
                    origin.node_id, origin.name, origin.direction, origin.port_type.name, pos
                )
            elif (node := next((i for i in self.items(pos) if isinstance(i, NodeItem)), None)) is not None:
                # Released on a node where nothing fits: say so (the window shows it at the cursor).
                side = "input" if origin.direction == "out" else "output"
                self.last_refusal = f"{node.title()} has no {side} that takes {origin.port_type.name}"
                self.status_message.emit(f"Can't connect: {self.last_refusal}")
            return
        if detached is not None and (target.node_id, target.name) == (detached.in_node, detached.in_port):
            return  # dropped back where it was
        if target.direction == origin.direction:
            self.last_refusal = (
                f"{'outputs' if origin.direction == 'out' else 'inputs'} connect to "
                f"{'inputs' if origin.direction == 'out' else 'outputs'}"
            )
            self.status_message.emit(f"Can't connect: {self.last_refusal}")
            return
        out, inp = (origin, target) if origin.direction == "out" else (target, origin)
        self.try_connect(out.node_id, out.name, inp.node_id, inp.name, detached)

    def _port_on_node_at(self: GraphScene, pos: QPointF, origin: PortItem) -> PortItem | None:
        """A wire dropped on a node's body goes to its first free port that takes it (else the first that does)."""
        node = next((i for i in self.items(pos) if isinstance(i, NodeItem)), None)
        if node is None or node.node_id == origin.node_id:
            return None
        ports = list(node.inputs.values()) if origin.direction == "out" else list(node.outputs.values())
        fits = [p for p in ports if self._fits(origin, p)]
        free = [p for p in fits if not p.connected]
        return (free or fits or [None])[0]

    def _fits(self: GraphScene, origin: PortItem, other: PortItem) -> bool:
        out, inp = (origin, other) if origin.direction == "out" else (other, origin)
        return self.model.connection_possible(out.node_id, out.name, inp.node_id, inp.name)[0]

    def _cancel_wire(self: GraphScene) -> None:
        if self._wire is not None:
            self.removeItem(self._wire)
        if self._detached is not None and self._detached in self.edge_items:
            self.edge_items[self._detached].setVisible(True)
        self._wire, self._wire_from, self._detached = None, None, None
        for item in self.node_items.values():
            for port in list(item.inputs.values()) + list(item.outputs.values()):
                if port.highlight is not None:
                    port.highlight = None
                    port.update()
