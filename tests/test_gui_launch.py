"""`app` / `app WORKFLOW.json` open the window through `app.gui.launch`, and it exits cleanly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.gui import launch
from app.gui.main_window import MainWindow

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "resources" / "workflows" / "text_demo.json"


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


@pytest.mark.slow  # a fresh process that imports diffusers: ~5-10 s
def test_the_model_libraries_are_imported_behind_the_open_window(tmp_path: Path) -> None:
    # A first Run otherwise spends its first seconds importing diffusers while the node says "importing".
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        f"""
        import sys, time
        from PySide6.QtCore import QSettings, QTimer
        from PySide6.QtWidgets import QApplication
        for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
            QSettings.setPath(fmt, QSettings.Scope.UserScope, {str(tmp_path)!r})
        from app.gui import launch
        from nodes.registry import default_registry
        from pipelines.diffusion.families import DIFFUSION_IMPORTS
        LAST = DIFFUSION_IMPORTS[-1]  # imported last by the warm-up thread
        app = QApplication([])
        shown_without = []
        started = time.monotonic()

        def poll():
            if not shown_without:  # the first event-loop turn: the window is painted
                shown_without.append(LAST not in sys.modules)
            if LAST in sys.modules or time.monotonic() - started > 60:
                print("warm", LAST in sys.modules, shown_without[0])
                app.quit()
            else:
                QTimer.singleShot(100, poll)

        QTimer.singleShot(0, poll)
        sys.exit(launch(None, default_registry(entry_point_packs=False)))
        """
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "NODELOOM_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warm True True" in proc.stdout
