"""Output history that survives restarts: every picture and text a run made, with its workflow, seeds and
report. Double-click reopens that exact graph; drag a picture onto the canvas (a Load Image node) or onto a
Load Image node.

Lives here: `HISTORY_FILE`, `HISTORY_MIME`, `HistoryEntry`, `one_line`, `read_history`, `append_history`, `HistoryPanel`.
Imports Qt, `nodes.workflow`.

Stored as JSON lines next to the pictures (`<output folder>/.nodeloom-history.jsonl`): one line per run,
appended, so a crash loses at most the run in flight and the history moves with its pictures.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QVBoxLayout, QWidget

HISTORY_FILE = ".nodeloom-history.jsonl"
HISTORY_MIME = "application/x-nodeloom-history"
MAX_ENTRIES = 500
PICTURES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass
class HistoryEntry:
    time: float
    label: str
    workflow: dict[str, Any]
    seeds: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def cancelled(self) -> bool:
        return bool(self.report.get("cancelled"))

    def caption(self) -> str:
        """What the list shows before the output itself: workflow, seed(s), time, and a cancelled mark."""
        stamp = time.strftime("%d %b %H:%M", time.localtime(self.time))
        # A run's label is "name (node.seed=N, …)": the seeds are shown once, from `seeds`, so keep the name.
        parts = [re.sub(r" \([^()]*=[^()]*\)$", "", self.label) if self.seeds else self.label]
        if self.seeds:
            parts.append("seed " + ", ".join(str(v) for v in self.seeds.values()))
        parts.append(stamp)
        return ("Cancelled · " if self.cancelled else "") + " · ".join(parts)


def one_line(text: str) -> str:
    """A text output as one line for the list (the view elides it; the tooltip holds the whole text)."""
    return " ".join(text.split())


def read_history(out_dir: Path) -> list[HistoryEntry]:
    """Entries oldest first; unreadable lines (a crash mid-write) are skipped."""
    path = Path(out_dir) / HISTORY_FILE
    entries = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines()[-MAX_ENTRIES:]:
            try:
                entries.append(HistoryEntry(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    return entries


def append_history(out_dir: Path, entry: HistoryEntry) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / HISTORY_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry)) + "\n")


class HistoryList(QListWidget):
    """Thumbnails; dragging one carries its file (as a URL) and a marker that it came from the history."""

    def mimeData(self, items: list[QListWidgetItem]) -> QMimeData:  # noqa: N802 (Qt name)
        data = QMimeData()
        files = [item.data(Qt.ItemDataRole.UserRole + 1) for item in items]
        files = [f for f in files if f]
        data.setUrls([QUrl.fromLocalFile(f) for f in files])
        data.setData(HISTORY_MIME, "\n".join(files).encode())
        return data


class HistoryPanel(QWidget):
    reopen = Signal(object)  # HistoryEntry

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list[HistoryEntry] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.list = HistoryList()
        # One row per output: thumbnail, then "workflow · seed · time" and the text snippet, elided on the
        # right (an icon grid wrapped texts into a column of one or two words per line).
        self.list.setViewMode(QListWidget.ViewMode.ListMode)
        self.list.setIconSize(QSize(64, 64))
        self.list.setMovement(QListWidget.Movement.Static)
        self.list.setDragEnabled(True)
        self.list.setWordWrap(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setUniformItemSizes(False)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.itemDoubleClicked.connect(self._reopen)
        layout.addWidget(self.list)

    def load(self, out_dir: Path) -> None:
        self.entries = []
        self.list.clear()
        for entry in read_history(out_dir):
            self.add(entry)

    def add(self, entry: HistoryEntry) -> None:
        self.entries.append(entry)
        index = len(self.entries) - 1
        stamp = time.strftime("%d %b %H:%M", time.localtime(entry.time))
        seeds = ", ".join(f"{k}={v}" for k, v in entry.seeds.items())
        tip = f"{entry.label}\n{stamp}" + (f"\nseed {seeds}" if seeds else "")
        if entry.cancelled:
            tip = f"Cancelled run: this output is what it made before it stopped\n{tip}"
        caption = entry.caption()
        tip += f"\n{entry.report.get('seconds', 0):.2f} s · double-click reopens this graph; drag onto the canvas"
        shown = False
        for file in entry.files:
            if Path(file).suffix.lower() in PICTURES and Path(file).is_file():
                item = QListWidgetItem(
                    QIcon(QPixmap.fromImage(QImage(file))), f"{caption}\n{Path(file).name}"
                )
                item.setData(Qt.ItemDataRole.UserRole + 1, file)
                self._insert(item, index, f"{tip}\n{file}")
                shown = True
        for node, text in entry.texts.items():
            item = QListWidgetItem(f"{caption}\n{node}: {one_line(text)[:300]}")
            self._insert(item, index, f"{tip}\n\n{text[:2000]}")
            shown = True
        if not shown and entry.files:
            self._insert(QListWidgetItem(f"{caption}\n{Path(entry.files[0]).name}"), index, tip)

    def _insert(self, item: QListWidgetItem, index: int, tip: str) -> None:
        # A narrow width hint: rows take the list's width and long labels elide instead of scrolling.
        lines = 2 * self.list.fontMetrics().lineSpacing()
        icon = self.list.iconSize().height() if not item.icon().isNull() else 0
        item.setSizeHint(QSize(40, max(lines, icon) + 8))
        item.setData(Qt.ItemDataRole.UserRole, index)
        item.setToolTip(tip)
        self.list.insertItem(0, item)  # newest first

    def _reopen(self, item: QListWidgetItem) -> None:
        self.reopen.emit(self.entries[item.data(Qt.ItemDataRole.UserRole)])
