"""The settings dialog and the memory settings: one list of policy names, a malformed budget can't be
saved, and a budget that has no effect on the chosen device is said so."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDialogButtonBox

from app.gui.settings import AppSettings, SettingsDialog
from memory.policy import POLICY_NAMES


def _dialog(qtbot, tmp_path: Path) -> SettingsDialog:
    settings = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    return dialog


def test_policy_choices_are_memorys_list(qtbot, tmp_path: Path) -> None:
    dialog = _dialog(qtbot, tmp_path)
    assert tuple(dialog.policy.itemText(i) for i in range(dialog.policy.count())) == POLICY_NAMES


def test_a_vram_budget_on_cpu_is_flagged_and_a_bad_one_refused(qtbot, tmp_path: Path) -> None:
    dialog = _dialog(qtbot, tmp_path)
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    dialog.device.setCurrentText("cpu")
    dialog.vram.setText("2GiB")
    assert "no effect on the CPU" in dialog.budget_note.text() and ok.isEnabled()
    dialog.vram.setText("")
    assert dialog.budget_note.text() == ""
    dialog.ram.setText("banana")
    assert "ram-budget" in dialog.budget_note.text() and not ok.isEnabled()
    dialog.ram.setText("2GiB")
    assert ok.isEnabled()
