"""One `MemoryConfig` for the CLI, the GUI and the sweep workers: each builds that type and passes it on
unchanged, so a setting means the same thing wherever it is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.batch.cli import _worker_config
from app.cli import memory_config
from app.gui.settings import AppSettings, SettingsDialog
from app.main import build_parser
from memory.config import MemoryConfig


def _settings(tmp_path: Path) -> AppSettings:
    return AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


def test_the_cli_flags_become_one_config_for_run_and_sweep(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["--run", "x.json", "--device", "cpu", "--offload", "sequential", "--ram-budget", "2GiB"]
    )
    # --ram-budget on the CPU is the RSS the run may reach: the process's own RSS is counted in it.
    expected = MemoryConfig(device="cpu", policy="sequential", ram_budget="2GiB", count_process_rss=True)
    assert memory_config(args) == expected
    assert _worker_config(args, tmp_path).memory == expected


def test_the_gui_stores_and_reads_back_the_same_config(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    # Nothing stored: MemoryConfig's own defaults, the RAM budget counting the process's RSS as the CLI's does.
    assert settings.memory == MemoryConfig(count_process_rss=True)
    config = MemoryConfig(
        device="cpu", policy="stream", vram_budget="0.5", ram_budget="3GiB", count_process_rss=True
    )
    settings.set_memory(config)
    assert _settings(tmp_path).memory == config


def test_a_hand_edited_bad_budget_is_named_and_the_dialog_still_opens(qtbot, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings.q.setValue("ram_budget", "banana")
    with pytest.raises(ValueError, match="ram-budget"):
        settings.memory  # noqa: B018 (the property is what reads and checks the stored values)
    dialog = SettingsDialog(settings)  # the place to fix it must open on the bad value
    qtbot.addWidget(dialog)
    assert dialog.ram.text() == "banana" and "ram-budget" in dialog.budget_note.text()
