"""`app` / `app WORKFLOW.json` open the window through `app.gui.launch`, and it exits cleanly."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.gui import launch
from app.gui.main_window import MainWindow

DEMO = Path(__file__).resolve().parent.parent / "resources" / "workflows" / "text_demo.json"


def test_launch_opens_the_workflow_and_returns_the_exit_code(qapp, tmp_path: Path, registry) -> None:
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):  # keep off the real ~/.config
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp_path))
    seen: dict[str, object] = {}

    def inspect_and_quit() -> None:
        window = next(
            w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()
        )
        seen["title"] = window.windowTitle()
        seen["nodes"] = sorted(window.model.node_ids())
        window.close()
        QApplication.instance().quit()

    QTimer.singleShot(1500, inspect_and_quit)
    assert launch(DEMO, registry) == 0
    assert seen == {
        "title": "text_demo.json (example) — Nodeloom",
        "nodes": ["greeting", "name", "save", "show"],
    }
