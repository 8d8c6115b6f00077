"""Editing from the main window: the palette (also from a wire dropped on empty canvas), the context menu,
copy/cut/paste/duplicate through the clipboard (snapshots in the workflow format), selection and the
inspector's parameter edits (each an undo command).

Lives here: `EditOpsMixin`. Imports Qt, `app.gui.*`, `nodes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu

from app.gui.commands import SetParamCommand, UpdateGroupCommand
from app.gui.edge_item import EdgeItem
from app.gui.group_item import GROUP_COLORS, GroupItem
from app.gui.node_item import NodeItem
from app.gui.plots import fmt_size
from nodes.spec import NodeSpec
from nodes.types import can_connect

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


class EditOpsMixin:
    """Mixed into MainWindow; uses its scene, view, model, palette, inspector and undo stack."""

    def open_palette(
        self: MainWindow, scene_pos: QPointF, accepts: Callable[[NodeSpec], bool] | None = None
    ) -> None:
        if accepts is None:
            self._pending_wire = None
        view_pos = self.view.mapFromScene(scene_pos)
        self.palette.open_at(scene_pos, self.view.viewport().mapToGlobal(view_pos), accepts)

    def _wire_dropped(
        self: MainWindow, node_id: str, port: str, direction: str, type_name: str, pos: QPointF
    ) -> None:
        source = (
            self.model.output_type(node_id, port)
            if direction == "out"
            else self.model.input_type(node_id, port)
        )
        if source is None:
            return

        def accepts(spec: NodeSpec) -> bool:
            if direction == "out":
                targets = [i.type for i in spec.inputs] + [p.kind.port_type for p in spec.params]
                return any(can_connect(source, t) for t in targets)
            return any(can_connect(o.type, source) for o in spec.outputs)

        self._pending_wire = (node_id, port, direction)
        self.open_palette(pos, accepts)
        self.status(f"Pick a node for the {type_name} wire")

    def _palette_chose(self: MainWindow, type_name: str, pos: QPointF) -> None:
        pending, self._pending_wire = self._pending_wire, None
        if pending is None:
            self.scene.add_node(type_name, pos)
        else:
            self.scene.add_node_wired(type_name, pos, *pending)

    def _fill_context_menu(self: MainWindow, menu: QMenu, scene_pos: QPointF) -> None:
        item = self.scene.itemAt(scene_pos, self.view.transform())
        while item is not None and item.parentItem() is not None:
            item = item.parentItem()
        if item is not None and not item.isSelected():
            self.scene.clearSelection()
            item.setSelected(True)
        menu.addAction("Add Node…", lambda: self.open_palette(scene_pos))
        if self.selected_node_ids():
            collapsed = all(self.scene.node_items[nid].is_collapsed() for nid in self.selected_node_ids())
            menu.addAction("Expand" if collapsed else "Collapse", lambda: self.toggle_collapsed())
        if isinstance(item, EdgeItem) and item.connection is not None:
            menu.addAction("Add Reroute Here", lambda: self.scene.insert_reroute(item.connection, scene_pos))
        if self.scene.selectedItems():
            menu.addAction("Duplicate", self.duplicate)
            menu.addAction("Copy", self.copy)
            menu.addAction("Group Selection", lambda: self.scene.group_selection())
            menu.addAction("Delete", self.scene.delete_selected)
        menu.addAction("Paste", self.paste)
        if isinstance(item, GroupItem):
            menu.addSeparator()
            menu.addAction("Rename Group…", lambda: self.scene.rename_group(item.index))
            colors = menu.addMenu("Group Colour")
            for color in GROUP_COLORS:
                colors.addAction(
                    color,
                    lambda c=color: self.undo_stack.push(UpdateGroupCommand(self.model, item.index, color=c)),
                )
        menu.addSeparator()
        menu.addAction("Fit Graph", lambda: self.view.fit())

    def _selection_changed(self: MainWindow) -> None:
        try:
            ids = self.scene.selected_node_ids()
        except RuntimeError:  # the scene is being torn down
            return
        if len(ids) == 1:
            self.show_in_inspector(ids[0])
        elif not ids:
            self.inspector.show_node(None)

    def show_in_inspector(self: MainWindow, node_id: str) -> None:
        """The node's settings, plus what its last run did: time, peak memory, or the error."""
        state = self.scene.run_states.get(node_id)
        facts = []
        if state is not None and state.status == "done":
            facts.append(f"Last run: {state.seconds:.2f} s")
        elif state is not None and state.status == "cached":
            facts.append("Last run: reused from the cache")
        if node_id in self.plots.peaks and state is not None and state.status in ("done", "error"):
            peak, baseline = self.plots.peaks[node_id]
            facts.append(
                f"peak memory {fmt_size(peak)} ({fmt_size(max(peak - baseline, 0))} above the start)"
            )
        error = f"Error: {state.message}" if state is not None and state.status == "error" else ""
        if self.inspector.node_id == node_id:
            self.inspector.set_facts(" · ".join(facts), error)
        else:
            self.inspector.show_node(node_id, status=error, info=" · ".join(facts))

    def _param_edited(self: MainWindow, node_id: str, name: str, value: object) -> None:
        self.undo_stack.push(SetParamCommand(self.model, node_id, name, value, self.inspector.session))

    def copy(self: MainWindow) -> bool:
        snapshot = self.scene.copy_selected()
        if snapshot is None:
            return False
        QGuiApplication.clipboard().setText(json.dumps(snapshot))
        self.status(f"Copied {len(snapshot['nodes'])} node(s)")
        return True

    def cut(self: MainWindow) -> None:
        if self.copy():
            self.scene.delete_selected()

    def paste(self: MainWindow) -> list[str]:
        text = QGuiApplication.clipboard().text()
        try:
            snapshot = json.loads(text)
        except json.JSONDecodeError:
            self.status("The clipboard holds no Nodeloom nodes")
            return []
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("nodes"), dict):
            self.status("The clipboard holds no Nodeloom nodes")
            return []
        return self.scene.paste(snapshot, self.view.cursor_scene_pos())

    def duplicate(self: MainWindow) -> list[str]:
        snapshot = self.scene.copy_selected()
        return self.scene.paste(snapshot, None, "Duplicate") if snapshot else []

    def select_all(self: MainWindow) -> None:
        for item in self.scene.items():
            if isinstance(item, NodeItem):
                item.setSelected(True)
