"""Everyday editing staples: bypass, mute and collapse (nodes or groups), rename a node's title on the
canvas, find a node in the graph.

Lives here: `StaplesMixin`. Imports Qt, `app.gui.commands`, `nodes.modes`. Modes, titles and the collapsed
state live in the workflow's `ui` section (saved with the file; `nodes.modes.apply_node_modes` rewrites the
graph before a run); each change is one undo step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QInputDialog

from app.gui.commands import SetNodeUiCommand
from nodes.modes import node_mode

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


class StaplesMixin:
    def selected_node_ids(self: MainWindow) -> list[str]:
        """Selected nodes, plus every node inside a selected group."""
        ids = [nid for nid, item in self.scene.node_items.items() if item.isSelected()]
        for group in self.scene.group_items:
            if group.isSelected():
                area = group.sceneBoundingRect()
                ids += [
                    nid
                    for nid, item in self.scene.node_items.items()
                    if area.contains(item.sceneBoundingRect().center()) and nid not in ids
                ]
        return ids

    def toggle_mode(self: MainWindow, mode: str, node_ids: list[str] | None = None) -> None:
        """Bypass or mute the selection; again on an all-set selection turns it back to normal."""
        ids = node_ids if node_ids is not None else self.selected_node_ids()
        if not ids:
            self.status(f"Select nodes or a group to {mode}")
            return
        workflow = self.model.workflow
        new = "normal" if all(node_mode(workflow, nid) == mode for nid in ids) else mode
        word = {"bypass": "Bypassed", "mute": "Muted", "normal": "Back to normal:"}[new]
        values = {nid: None if new == "normal" else new for nid in ids}
        self.undo_stack.push(SetNodeUiCommand(self.model, "mode", values, f"{word} {', '.join(ids)}"))
        self._stale_timer.start()
        self.status(f"{word} {', '.join(ids)}")

    def toggle_collapsed(self: MainWindow, node_ids: list[str] | None = None) -> None:
        """Collapse the selection (or a selected group's nodes) to title bars; again expands them."""
        self.scene.toggle_collapsed(node_ids if node_ids is not None else self.selected_node_ids())

    def rename_node(self: MainWindow, node_id: str | None = None, title: str | None = None) -> None:
        """The title shown on the canvas (the node id and type stay)."""
        ids = [node_id] if node_id else self.selected_node_ids()[:1]
        if not ids:
            self.status("Select a node to rename")
            return
        nid = ids[0]
        item = self.scene.node_items[nid]
        if title is None:
            title, ok = QInputDialog.getText(self, "Rename node", f"Title for {nid}:", text=item.title())
            if not ok:
                return
        # Empty: back to the type's title.
        self.undo_stack.push(
            SetNodeUiCommand(self.model, "title", {nid: title.strip() or None}, f"Rename {nid}")
        )

    def find_in_graph(self: MainWindow, query: str | None = None) -> str | None:
        """Find a node by title, id or type and jump to it; returns its id. The same query again (Ctrl+F
        then Enter, or F3) moves on to the next match, so every match can be reached."""
        if query is None:
            last = getattr(self, "_find_state", ("", -1))[0]
            query, ok = QInputDialog.getText(self, "Find in graph", "Node title, id or type:", text=last)
            if not ok:
                return None
        return self._find_step(query)

    def find_next(self: MainWindow) -> str | None:
        """F3: the next match of the last search (asks for a query when there was none)."""
        last = getattr(self, "_find_state", ("", -1))[0]
        return self._find_step(last) if last else self.find_in_graph()

    def find_matches(self: MainWindow, query: str) -> list[str]:
        """Node ids whose title, id or type contains `query` (case-insensitive), in graph order."""
        q = query.lower().strip()
        if not q:
            return []
        return [
            nid
            for nid, item in self.scene.node_items.items()
            if any(q in text.lower() for text in (item.title(), nid, self.model.node(nid).type))
        ]

    def _find_step(self: MainWindow, query: str) -> str | None:
        matches = self.find_matches(query)
        if not matches:
            self._find_state = ("", -1)
            self.status(f"No node matches {query!r}")
            return None
        last_query, last_index = getattr(self, "_find_state", ("", -1))
        same = last_query.lower().strip() == query.lower().strip()
        index = (last_index + 1) % len(matches) if same else 0
        self._find_state = (query, index)
        nid = matches[index]
        item = self.scene.node_items[nid]
        self.scene.clearSelection()
        item.setSelected(True)
        self.view.centerOn(item)
        self.status(f"Found {nid} ({index + 1} of {len(matches)}; F3 for the next)")
        return nid
