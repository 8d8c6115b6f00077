"""F1 lists every shortcut from the actions themselves, as a two-column table."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget

from tests.gui_support import make_window


def test_f1_shows_a_table_of_every_action_shortcut(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    qtbot.keyClick(window, Qt.Key.Key_F1)
    table = window.shortcuts_dialog.findChild(QTableWidget, "shortcutsTable")
    assert table.columnCount() == 2
    rows = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
    keys = " | ".join(rows)
    for missing_before in ("Ctrl+Shift+M", "Ctrl+Shift+Return", "Ctrl+,", "Ctrl+I", "F3"):
        assert missing_before in keys
    assert rows["Ctrl+Shift+M"] == "Minimap"
    assert rows["Ctrl+I"] == "Import"
    assert "Undo" in rows.values() and "Redo" in rows.values()
