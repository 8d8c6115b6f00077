"""Run → Run sweep...: the dialog counts jobs and refuses bad values; a sweep fills the job list as jobs end and
shows the contact sheet in the Output dock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QComboBox, QLineEdit

from app.gui.sweep_dialog import SweepDialog
from nodes.workflow import load_workflow
from tests import gui_support

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


def wait_until(condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds, sleeping between rounds so the sweep thread gets the GIL."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


def _set_values(dialog: SweepDialog, row: int, target: str, values: str) -> None:
    combo, edit = dialog.table.cellWidget(row, 0), dialog.table.cellWidget(row, 1)
    assert isinstance(combo, QComboBox) and isinstance(edit, QLineEdit)
    combo.setCurrentText(target)
    edit.setText(values)


def test_sweep_dialog_and_run_show_progress_and_contact_sheet(qtbot, tmp_path: Path, registry) -> None:
    win = gui_support.make_window(qtbot, tmp_path, registry, for_runs=True)
    wf = load_workflow(TXT2IMG, registry)
    wf.nodes["sampler"].params["steps"] = 3
    win.model.load(wf)
    run_menu = next(a.menu() for a in win.menuBar().actions() if a.text() == "&Run")
    assert win.sweep.action in run_menu.actions()

    dialog = SweepDialog(win.model.to_workflow(), registry, win)
    qtbot.addWidget(dialog)
    assert dialog.items() == ["sampler.seed=42..45"]  # starts with the seed, ready to run
    assert dialog.summary.text() == "4 job(s)" and dialog.run_button.isEnabled()
    _set_values(dialog, 0, "sampler.seed", "1,2,3")
    dialog.add_row("sampler.cfg", "3,6")
    assert dialog.summary.text() == "6 job(s)"
    dialog.zip.setChecked(True)  # 3 seeds cannot pair with 2 cfgs
    assert not dialog.run_button.isEnabled() and "as many" in dialog.summary.text()
    dialog.zip.setChecked(False)
    _set_values(dialog, 1, "sampler.steps", "0..2")
    assert not dialog.run_button.isEnabled() and "below the minimum" in dialog.summary.text()
    _set_values(dialog, 1, "sampler.cfg", "3,6")
    choice = dialog.choice()
    assert choice is not None and choice.cluster is None and len(choice.plan.jobs) == 6

    assert win.sweep.start(choice)
    wait_until(lambda: win.sweep.last_report is not None)
    report = win.sweep.last_report
    assert report["counts"]["ok"] == 6
    panel = win.sweep.panel
    rows = [panel.jobs.item(i).text() for i in range(panel.jobs.count())]
    assert len(rows) == 6 and all(r.startswith("✓") for r in rows)
    assert "seed=2, cfg=6.0" in rows[3]
    assert panel.progress.value() == 6
    assert panel.sheet.pixmap() is not None and not panel.sheet.pixmap().isNull()
    assert Path(report["contact_sheet"]["png"]).is_file()
    assert win.output.files.count() == 1  # the contact sheet, in the Images tab too
    assert win.output.currentWidget() is panel
