"""User settings (device, budgets, offload policy, output folder, pickle loading, recent files) persisted
in QSettings, and the Settings dialog.

Lives here: `AppSettings`, `SettingsDialog`. Imports Qt, `memory.config` (the one `MemoryConfig`, which the
settings store field by field under the same names), `app.gui.models_settings` (the models folders row).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)

from memory.config import MemoryConfig
from memory.policy import POLICIES, POLICY_NAMES

MAX_RECENT = 10
# The MemoryConfig fields the GUI sets, stored under their own names; the rest keep MemoryConfig's defaults.
MEMORY_KEYS = ("device", "policy", "vram_budget", "ram_budget")


class AppSettings:
    """Typed access to QSettings; tests pass their own (INI file) QSettings."""

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self.q = qsettings or QSettings("Nodeloom", "Nodeloom")

    def _str(self, key: str, default: str) -> str:
        value = self.q.value(key, default)
        return str(value) if value is not None else default

    def stored_memory(self) -> dict[str, str]:
        """The memory settings as stored ("" for unset), unchecked: the dialog shows even a malformed one."""
        return {key: self._str(key, "") for key in MEMORY_KEYS}

    @property
    def memory(self) -> MemoryConfig:
        """The stored memory settings; raises ValueError naming a malformed one (a hand-edited file)."""
        stored = {key: value for key, value in self.stored_memory().items() if value}
        return MemoryConfig(**stored, count_process_rss=True)  # the RAM budget on the CPU: the run's RSS

    def set_memory(self, value: MemoryConfig) -> None:
        for key in MEMORY_KEYS:
            self.q.setValue(key, getattr(value, key) or "")

    @property
    def allow_pickle(self) -> bool:
        # INI-backed QSettings hands booleans back as the strings "true"/"false".
        value = self.q.value("allow_pickle", False)
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)

    def set_allow_pickle(self, value: bool) -> None:
        self.q.setValue("allow_pickle", bool(value))

    @property
    def live_plan(self) -> bool:
        """Recompute the memory plan as the graph changes (View > Live memory plan); on unless turned off."""
        value = self.q.value("plan/live", True)
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)

    def set_live_plan(self, value: bool) -> None:
        self.q.setValue("plan/live", bool(value))

    @property
    def output_dir(self) -> Path:
        return Path(self._str("output_dir", str(Path.cwd() / "outputs")))

    def set_output_dir(self, path: Path) -> None:
        self.q.setValue("output_dir", str(path))

    def recent(self) -> list[str]:
        value = self.q.value("recent", [])
        if isinstance(value, str):
            value = [value] if value else []
        return [str(v) for v in (value or [])]

    def add_recent(self, path: Path) -> None:
        entry = str(Path(path).resolve())
        items = [entry] + [p for p in self.recent() if p != entry]
        self.q.setValue("recent", items[:MAX_RECENT])

    def clear_recent(self) -> None:
        self.q.setValue("recent", [])


def _device_choices() -> list[str]:
    choices = ["auto", "cpu"]
    try:
        import torch

        choices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            choices.append("mps")
    except ImportError:
        pass
    return choices


class SettingsDialog(QDialog):
    def __init__(
        self, settings: AppSettings, parent: QWidget | None = None, fixed_roots: Sequence[Path] = ()
    ) -> None:
        """`fixed_roots`: models folders from --models-dir or the environment (shown, not removable)."""
        from app.gui.models_settings import ModelsFolders

        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.settings = settings
        self.setMinimumWidth(560)
        memory = MemoryConfig()  # shown where nothing is stored
        stored = settings.stored_memory()
        form = QFormLayout(self)
        self.device = QComboBox()
        self.device.setEditable(True)
        self.device.addItems(_device_choices())
        self.device.setCurrentText(stored["device"] or memory.device)
        self.policy = QComboBox()
        self.policy.addItems(POLICY_NAMES)
        self.policy.setCurrentText(stored["policy"] or memory.policy)
        self.policy.setToolTip("\n".join(f"{p.name}: {p.help}" for p in POLICIES))
        self.vram = QLineEdit(stored["vram_budget"])
        self.vram.setPlaceholderText("all free GPU memory (e.g. 6GiB or 0.8)")
        self.ram = QLineEdit(stored["ram_budget"])
        self.ram.setPlaceholderText("all available RAM (e.g. 8GiB or 0.5)")
        # Says when a budget is malformed or does nothing on the chosen device (e.g. a VRAM budget on CPU).
        self.budget_note = QLabel("")
        self.budget_note.setObjectName("hint")
        self.budget_note.setWordWrap(True)
        for edit in (self.vram, self.ram):
            edit.textChanged.connect(self._check_budgets)
        self.device.currentTextChanged.connect(self._check_budgets)
        self.out = QLineEdit(str(settings.output_dir))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        out_row = QHBoxLayout()
        out_row.addWidget(self.out, 1)
        out_row.addWidget(browse)
        self.allow_pickle = QCheckBox("Allow pickle checkpoints (.ckpt/.pt/.bin — they can run code)")
        self.allow_pickle.setChecked(settings.allow_pickle)
        self.allow_pickle.setToolTip(
            "Pickled weights can execute code when loaded; enable only for files you "
            "trust.\nOff: such files are refused (convert them to .safetensors)."
        )
        form.addRow("Device", self.device)
        form.addRow("Offload policy", self.policy)
        form.addRow("GPU memory budget (VRAM)", self.vram)
        form.addRow("Host RAM budget", self.ram)
        form.addRow(self.budget_note)
        form.addRow("Output folder", out_row)
        form.addRow("Model files", self.allow_pickle)
        self.models = ModelsFolders(list(fixed_roots))  # the saved roots `app models add-root` edits too
        form.addRow("Models folders", self.models)
        note = QLabel(
            "Changing the device or budgets restarts the memory manager (the result cache is cleared)."
        )
        note.setObjectName("hint")
        note.setWordWrap(True)
        form.addRow(note)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self._ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self._check_budgets()

    def _check_budgets(self) -> None:
        """Refuse a malformed budget (OK disabled) and warn about one that has no effect on the device."""
        device = self.device.currentText().strip() or "auto"
        try:
            config = MemoryConfig(
                policy=self.policy.currentText(),
                vram_budget=self.vram.text().strip() or None,
                ram_budget=self.ram.text().strip() or None,
            )
        except ValueError as exc:
            self.budget_note.setText(f"⚠ {exc}")
            self._ok.setEnabled(False)
            return
        self._ok.setEnabled(True)
        kind = (
            "cpu" if device == "cpu" or (device == "auto" and _device_choices() == ["auto", "cpu"]) else "gpu"
        )
        notes = config.ignored_settings(kind)
        self.budget_note.setText("⚠ " + "; ".join(notes) if notes else "")

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Output folder", self.out.text())
        if folder:
            self.out.setText(folder)

    def accept(self) -> None:
        self.settings.set_memory(
            MemoryConfig(
                device=self.device.currentText().strip() or "auto",
                policy=self.policy.currentText(),
                vram_budget=self.vram.text().strip() or None,
                ram_budget=self.ram.text().strip() or None,
            )
        )
        self.settings.set_output_dir(Path(self.out.text().strip() or "outputs"))
        self.settings.set_allow_pickle(self.allow_pickle.isChecked())
        self.models.save()
        super().accept()
