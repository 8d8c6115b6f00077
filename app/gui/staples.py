"""Everyday editing staples: bypass, mute and collapse (nodes or groups), rename a node's title on the
canvas, find a node in the graph (the find bar, app/gui/find_bar.py, cycles through the matches).

Lives here: `StaplesMixin`. Imports Qt, `app.gui.commands`, `app.gui.find_bar`, `nodes.modes`. Modes, titles
and the collapsed state live in the workflow's `ui` section (saved with the file; `nodes.modes.apply_node_modes`
rewrites the graph before a run); each change is one undo step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QInputDialog

from app.gui.commands import SetNodeUiCommand
from app.gui.find_bar import FindBar
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
        """Find a node by title, id or type and jump to it; returns its id. The same query again moves on to
        the next match, so every match can be reached. With no query (Ctrl+F): the non-modal find bar."""
        if query is None:
            self._find_bar().open(self._find_state[0])
            return None
        return self._find_step(query)

    def find_next(self: MainWindow, direction: int = 1) -> str | None:
        """F3: the next (or with -1 the previous) match of the last search; the find bar when there was none."""
        last = self._find_state[0]
        if not last:
            return self.find_in_graph()
        return self._find_step(last, direction)

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

    def _find_bar(self: MainWindow) -> FindBar:
        if self.find_bar is None:  # built on first use
            self.find_bar = FindBar(
                self.view,
                search=lambda text: self._find_counted(text, 1, restart=True),
                step=lambda direction: self._find_counted(self.find_bar.field.text(), direction),
            )
        return self.find_bar

    def _find_counted(self: MainWindow, query: str, direction: int, restart: bool = False) -> tuple[int, int]:
        """For the find bar: (position from 1, matches) after the step, (0, 0) for none."""
        if self._find_step(query, direction, restart) is None:
            return 0, 0
        _query, index, total = self._find_state
        return index + 1, total

    def _find_step(self: MainWindow, query: str, direction: int = 1, restart: bool = False) -> str | None:
        matches = self.find_matches(query)
        if not matches:
            self._find_state = ("", -1, 0)
            self.status(f"No node matches {query!r}")
            return None
        last_query, last_index, _total = self._find_state
        same = not restart and last_query.lower().strip() == query.lower().strip()
        index = (last_index + direction) % len(matches) if same else 0
        self._find_state = (query, index, len(matches))
        nid = matches[index]
        item = self.scene.node_items[nid]
        self.scene.clearSelection()
        item.setSelected(True)
        self.view.centerOn(item)
        self.status(f"Found {nid} ({index + 1} of {len(matches)}; F3 for the next)")
        return nid
