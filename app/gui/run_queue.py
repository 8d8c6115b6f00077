"""The run queue: Run while a run is going queues the graph as it is now; the queue is a dock you can edit.

Lives here: `QueuedRun`, `QueuePanel`, `SEED_MODES`, `seed_controls`, `next_seed`. Imports Qt, `nodes.workflow`.

Seed behaviour after each run (ComfyUI's "control after generate"): fixed, increment or randomize, chosen per
seed parameter and saved in the workflow's `ui` section (`ui.nodes.<id>.seed_control.<param>`), so it
never changes what a headless run of the file does.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.elided_label import ElidedLabel
from nodes.workflow import Workflow

SEED_MODES = ("fixed", "increment", "randomize")
SEED_TOP = 2**32 - 1  # randomize stays in the range every tool (and a 32-bit field) can show


@dataclass
class QueuedRun:
    workflow: Workflow  # what runs (bypassed/muted nodes already set aside)
    label: str
    queued_at: float = field(default_factory=time.time)
    source: Workflow | None = None  # the graph as edited, modes included: what the history reopens


def seed_controls(workflow: Workflow) -> dict[tuple[str, str], str]:
    """(node, param) -> mode for every seed parameter with a non-fixed mode in the workflow's ui."""
    out = {}
    for nid, ui in workflow.ui.get("nodes", {}).items():
        for param, mode in (ui.get("seed_control") or {}).items():
            if mode in SEED_MODES and mode != "fixed" and nid in workflow.nodes:
                out[(nid, param)] = mode
    return out


def next_seed(value: int, mode: str, rng: random.Random, top: int = SEED_TOP) -> int:
    if mode == "increment":
        return 0 if value >= top else value + 1
    if mode == "randomize":
        return rng.randint(0, top)
    return value


class QueuePanel(QWidget):
    """Waiting runs, first to start at the top: remove, move up/down, clear."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.jobs: list[QueuedRun] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.running = ElidedLabel("Nothing running")  # a long run label must not widen the dock
        self.running.setObjectName("hint")
        self.list = QListWidget()
        self.list.setToolTip("Runs waiting for the current one; Del removes the selected run")
        buttons = QHBoxLayout()
        self.up_button = QPushButton("Up")
        self.down_button = QPushButton("Down")
        self.remove_button = QPushButton("Remove")
        self.clear_button = QPushButton("Clear")
        for button in (self.up_button, self.down_button, self.remove_button, self.clear_button):
            buttons.addWidget(button)
        self.up_button.clicked.connect(lambda: self.move_selected(-1))
        self.down_button.clicked.connect(lambda: self.move_selected(1))
        self.remove_button.clicked.connect(self.remove_selected)
        self.clear_button.clicked.connect(self.clear)
        layout.addWidget(self.running)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)

    def add(self, job: QueuedRun) -> None:
        self.jobs.append(job)
        self._refresh()

    def pop(self) -> QueuedRun | None:
        job = self.jobs.pop(0) if self.jobs else None
        self._refresh()
        return job

    def set_running(self, label: str | None) -> None:
        self.running.setText(f"Running: {label}" if label else "Nothing running")

    def remove_selected(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self.jobs):
            del self.jobs[row]
            self._refresh(min(row, len(self.jobs) - 1))

    def move_selected(self, delta: int) -> None:
        row = self.list.currentRow()
        to = row + delta
        if 0 <= row < len(self.jobs) and 0 <= to < len(self.jobs):
            self.jobs[row], self.jobs[to] = self.jobs[to], self.jobs[row]
            self._refresh(to)

    def clear(self) -> None:
        self.jobs.clear()
        self._refresh()

    def keyPressEvent(self, event: object) -> None:
        if getattr(event, "key", lambda: None)() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace):
            self.remove_selected()
            return
        super().keyPressEvent(event)  # type: ignore[arg-type]

    def _refresh(self, select: int | None = None) -> None:
        self.list.clear()
        for i, job in enumerate(self.jobs, 1):
            stamp = time.strftime("%H:%M:%S", time.localtime(job.queued_at))
            self.list.addItem(QListWidgetItem(f"{i}. {job.label}  ·  queued {stamp}"))
        if select is not None and select >= 0:
            self.list.setCurrentRow(select)
        self.changed.emit()
