"""Helpers shared by the GUI tests: a main window with throwaway settings, shown and active."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from app.gui.autosave import Autosave
from app.gui.main_window import MainWindow
from app.gui.settings import AppSettings
from memory.config import MemoryConfig


def make_window(  # noqa: ANN001
    qtbot, tmp_path: Path, registry, *, for_runs: bool = False, live_plan: bool = False, plots: bool = False
) -> MainWindow:
    """A window whose settings and autosave live under `tmp_path`; `for_runs` adds an output folder and CPU.
    The live memory plan is off unless `live_plan` (it runs the loader nodes on a thread after each edit,
    which tests about other things do not need on a 2-core machine). The Live plots dock is closed, as a
    user may close it, unless `plots`: showing it builds and paints three pyqtgraph plots, ~0.6 s of a ~1 s
    window. Closed, the panel still records what it is sent (`window.plots.spans`, `.steps`, `.peaks`)."""
    settings = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    settings.set_live_plan(live_plan)
    if for_runs:
        settings.set_output_dir(tmp_path / "outputs")
        settings.set_memory(MemoryConfig(device="cpu", policy="auto"))
    win = MainWindow(registry, settings, Autosave(tmp_path / "autosave"))
    win.ask_save_changes = lambda: "discard"  # type: ignore[method-assign]
    if not plots:
        win.plots_dock.hide()
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitActive(win):  # shortcuts need an active window
        win.activateWindow()
    return win
