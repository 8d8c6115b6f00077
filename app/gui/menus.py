"""The main window's menus and toolbar: every action with its shortcut and tooltip, in one place (F1 lists
them).

Lives here: `MenusMixin`, mixed into `MainWindow` (app/gui/main_window.py), whose slots the actions call.
Imports Qt, `app.gui.sweep_panel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QHeaderView,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
)

from app.gui import sweep_panel

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


# What no QAction carries (mouse gestures, keys the canvas handles itself); F1 lists them after the actions.
GESTURES = [
    ("Tab / double-click canvas", "Add a node (search by name, tag or ComfyUI class)"),
    ("Drag from a port", "Connect; from a connected input: move or remove the wire"),
    ("Double-click a title", "Collapse / expand the node"),
    ("Double-click a wire", "Add a reroute dot"),
    ("Wheel", "Zoom"),
    ("Middle drag / Space+drag", "Pan"),
]

# Alternates Qt's standard Undo/Redo bindings carry (old Windows keys, the keyboard's own Undo key): noise in F1.
LEGACY_KEYS = {"Alt+Backspace", "Alt+Shift+Backspace", "Undo", "Redo"}


class MenusMixin:
    def _action(
        self: MainWindow,
        text: str,
        slot: object,
        shortcut: QKeySequence | str | list | None = None,
        canvas_only: bool = False,
        tip: str = "",
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            keys = shortcut if isinstance(shortcut, list) else [shortcut]
            action.setShortcuts([QKeySequence(k) for k in keys])
        if canvas_only:  # keys that text boxes need (Backspace, Ctrl+C...) only act on the canvas
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            self.view.addAction(action)
        else:
            self.addAction(action)
        action.triggered.connect(slot)  # type: ignore[arg-type]
        hint = f" ({action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)})" if shortcut else ""
        action.setToolTip((tip or text.replace("&", "").rstrip("…")) + hint)
        return action

    def _toolbar_twin(self: MainWindow, label: str, slot: object, menu_action: QAction) -> QAction:
        """A toolbar action with a fixed `label` that follows `menu_action`'s enabled state and text."""
        twin = QAction(label, self)
        twin.triggered.connect(slot)  # type: ignore[arg-type]
        keys = menu_action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)

        def follow() -> None:
            if not (shiboken6.isValid(twin) and shiboken6.isValid(menu_action)):  # window being destroyed
                return
            twin.setEnabled(menu_action.isEnabled())
            twin.setToolTip(f"{menu_action.text().replace('&', '')} ({keys})")

        menu_action.changed.connect(follow)
        follow()
        return twin

    def shortcut_rows(self: MainWindow) -> list[tuple[str, str]]:
        """(keys, what) for every action with a shortcut, read from the actions themselves, then GESTURES."""
        rows: list[tuple[str, str]] = []
        seen: set[int] = set()
        in_menus = [a for menu in self.menuBar().actions() if menu.menu() for a in menu.menu().actions()]
        # Menu order first (File, Edit, View, Run, Help), then any action that is in no menu.
        for action in [*in_menus, *self.actions(), *self.view.actions(), *self.findChildren(QAction)]:
            keys = [k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts()]
            keys = [k for k in keys if k and k not in LEGACY_KEYS]
            if not keys or id(action) in seen:
                continue
            seen.add(id(action))
            what = action.text().replace("&", "").rstrip("….").lstrip("▶■ ").strip()
            if action in (self.undo_action, self.redo_action):  # their text names the next step
                what = "Undo" if action is self.undo_action else "Redo"
            rows.append((" / ".join(dict.fromkeys(keys)), what))
        return [*rows, *GESTURES]

    def _shortcuts_dialog(self: MainWindow) -> QDialog:
        """A two-column table (keys | action), non-modal so it can stay open beside the canvas."""
        rows = self.shortcut_rows()
        dialog = QDialog(self)
        dialog.setWindowTitle("Keyboard shortcuts")
        table = QTableWidget(len(rows), 2, dialog)
        table.setObjectName("shortcutsTable")
        table.setHorizontalHeaderLabels(["Keys", "Action"])
        table.verticalHeader().setVisible(False)
        table.verticalHeader().setDefaultSectionSize(22)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, (keys, what) in enumerate(rows):
            table.setItem(row, 0, QTableWidgetItem(keys))
            table.setItem(row, 1, QTableWidgetItem(what))
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(dialog)
        layout.addWidget(table)
        dialog.resize(620, min(900, 60 + 22 * len(rows)))
        return dialog

    def _build_actions(self: MainWindow) -> None:
        S = QKeySequence.StandardKey
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.file_menu = file_menu  # app/gui/remote_run.py adds Connect to Server here
        self.new_action = self._action("&New", self.new_file, S.New)
        self.open_action = self._action("&Open…", self.open_dialog, S.Open)
        self.save_action = self._action("&Save", self.save, S.Save)
        self.save_as_action = self._action("Save &As…", self.save_as, S.SaveAs)
        for action in (self.new_action, self.open_action):
            file_menu.addAction(action)
        self.recent_menu = QMenu("Open &Recent", self)
        self.recent_menu.aboutToShow.connect(self.fill_recent_menu)
        file_menu.addMenu(self.recent_menu)
        self.import_action = self._action(
            "&Import…", self.import_dialog, "Ctrl+I", tip="Open another tool's workflow"
        )
        file_menu.addAction(self.import_action)
        file_menu.addSeparator()
        file_menu.addAction(self.save_action)
        file_menu.addAction(self.save_as_action)
        file_menu.addSeparator()
        self.settings_action = self._action(
            "Se&ttings…",
            self.open_settings,
            "Ctrl+,",
            tip="Device, memory budget, offload policy, output folder",
        )
        file_menu.addAction(self.settings_action)
        file_menu.addSeparator()
        file_menu.addAction(self._action("&Quit", self.close, S.Quit))

        edit = bar.addMenu("&Edit")
        self.edit_menu = edit  # app/gui/arrange.py adds Arrange here
        self.undo_action = self.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcuts(QKeySequence.keyBindings(S.Undo))
        self.redo_action = self.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts(QKeySequence.keyBindings(S.Redo) + [QKeySequence("Ctrl+Y")])
        edit.addAction(self.undo_action)
        edit.addAction(self.redo_action)
        edit.addSeparator()
        edit.addAction(
            self._action(
                "Add &Node…",
                lambda: self.open_palette(self.view.cursor_scene_pos()),
                "Shift+A",
                tip="Add a node (also Tab or double-click the canvas)",
            )
        )
        edit.addAction(self._action("Cu&t", self.cut, S.Cut, canvas_only=True))
        edit.addAction(self._action("&Copy", self.copy, S.Copy, canvas_only=True))
        edit.addAction(self._action("&Paste", self.paste, S.Paste, canvas_only=True))
        edit.addAction(self._action("&Duplicate", self.duplicate, "Ctrl+D", canvas_only=True))
        edit.addAction(
            self._action("&Delete", self.scene.delete_selected, ["Del", "Backspace"], canvas_only=True)
        )
        edit.addAction(self._action("Select &All", self.select_all, S.SelectAll, canvas_only=True))
        edit.addSeparator()
        edit.addAction(
            self._action("&Group Selection", lambda: self.scene.group_selection(), "Ctrl+G", canvas_only=True)
        )
        edit.addSeparator()
        edit.addAction(
            self._action(
                "&Bypass",
                lambda: self.toggle_mode("bypass"),
                "Ctrl+B",
                canvas_only=True,
                tip="Pass the selected nodes (or group) through: their inputs go straight on",
            )
        )
        edit.addAction(
            self._action(
                "&Mute",
                lambda: self.toggle_mode("mute"),
                "Ctrl+M",
                canvas_only=True,
                tip="Skip the selected nodes (or group) and what needs them",
            )
        )
        edit.addAction(
            self._action(
                "Co&llapse / Expand",
                lambda: self.toggle_collapsed(),
                "Alt+C",
                canvas_only=True,
                tip="Show only the title bar of the selected nodes (or a group's nodes); again to expand",
            )
        )
        edit.addAction(self._action("Re&name Node…", lambda: self.rename_node(), "F2", canvas_only=True))
        edit.addAction(self._action("&Find in Graph…", lambda: self.find_in_graph(), "Ctrl+F"))
        edit.addAction(
            self._action(
                "Find &Next", lambda: self.find_next(), "F3", tip="The next node matching the search"
            )
        )
        edit.addAction(
            self._action(
                "Find &Previous", lambda: self.find_next(-1), "Shift+F3", tip="The previous node matching"
            )
        )

        view = bar.addMenu("&View")
        self.fit_action = self._action("&Fit Graph", lambda: self.view.fit(), "F", canvas_only=True)
        view.addAction(self.fit_action)
        view.addAction(self._action("Zoom &In", lambda: self.view.set_zoom(self.view.zoom() * 1.2), S.ZoomIn))
        view.addAction(
            self._action("Zoom &Out", lambda: self.view.set_zoom(self.view.zoom() / 1.2), S.ZoomOut)
        )
        view.addAction(self._action("&Actual Size", lambda: self.view.set_zoom(1.0), "Ctrl+0"))
        self.minimap_action = self._action("&Minimap", self._toggle_minimap, "Ctrl+Shift+M")
        self.minimap_action.setCheckable(True)
        self.minimap_action.setChecked(self.settings.q.value("view/minimap", True) not in (False, "false"))
        self.minimap.setVisible(self.minimap_action.isChecked())
        view.addAction(self.minimap_action)
        view.addSeparator()
        for dock in (
            self.inspector_dock,
            self.output_dock,
            self.outputs_dock,
            self.queue_dock,
            self.plots_dock,
            self.history_dock,
        ):
            view.addAction(dock.toggleViewAction())
        self.view_menu = view  # app/gui/plan_view.py adds the Plan dock and Live memory plan here

        run = bar.addMenu("&Run")
        self.run_action = self._action(
            "&Run", self.run_workflow, ["Ctrl+Return", "Ctrl+Enter"], tip="Run the graph"
        )
        self.cancel_action = self._action(
            "&Cancel", self.cancel_run, "Esc", tip="Stop the run at the next step"
        )
        self.cancel_action.setEnabled(False)
        run.addAction(self.run_action)
        run.addAction(self.cancel_action)
        self.sweep = sweep_panel.install(self, run)  # Run sweep... (app/gui/sweep_panel.py)

        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self._action("Keyboard &Shortcuts", self.show_shortcuts, "F1"))

        tools = self.addToolBar("Main")
        tools.setObjectName("main-toolbar")
        tools.setMovable(False)
        for action in (self.new_action, self.open_action, self.save_action):
            tools.addAction(action)
        tools.addSeparator()
        # Fixed labels on the toolbar (the Edit menu's items name the step): a label that grows with
        # "Undo Connect vaedecode → save_image.image" pushes Run sideways; the detail is in the tooltip.
        self.tool_undo_action = self._toolbar_twin("Undo", self.undo_stack.undo, self.undo_action)
        self.tool_redo_action = self._toolbar_twin("Redo", self.undo_stack.redo, self.redo_action)
        tools.addAction(self.tool_undo_action)
        tools.addAction(self.tool_redo_action)
        tools.addSeparator()
        tools.addAction(self.fit_action)
        tools.addAction(self.settings_action)
        tools.addSeparator()
        tools.addAction(self.run_action)
        tools.addAction(self.cancel_action)
        tools.widgetForAction(self.run_action).setObjectName("runButton")
        tools.widgetForAction(self.cancel_action).setObjectName("cancelButton")
        self.run_action.setText("▶  Run")
        self.cancel_action.setText("■  Cancel")
        for action in (self.run_action, self.cancel_action):
            button = tools.widgetForAction(action)
            if isinstance(button, QToolButton):
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
