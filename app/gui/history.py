"""Output history that survives restarts: every picture and text a run made, with its workflow, seeds and
report. Double-click reopens that exact graph; drag a picture onto the canvas (a Load Image node) or onto a
Load Image node.

Lives here: `HISTORY_FILE`, `HISTORY_MIME`, `HistoryEntry`, `one_line`, `read_history`, `append_history`, `HistoryPanel`.
Imports Qt, `app.history_file` (the file's format, reader and writer, Qt-free: the server writes it too) and
`nodes.run_figures` (the figures line in a row's tooltip). A video shows as one row with its poster frame.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QMimeData, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QVBoxLayout, QWidget

# The file itself is Qt-free (the server writes it too); re-exported for the window's modules.
from app.history_file import HISTORY_FILE, MAX_ENTRIES, HistoryEntry, append_history, read_history
from nodes.run_figures import figures_line

__all__ = [
    "HISTORY_FILE",
    "HISTORY_MIME",
    "MAX_ENTRIES",
    "HistoryEntry",
    "HistoryPanel",
    "append_history",
    "one_line",
    "read_history",
]

HISTORY_MIME = "application/x-nodeloom-history"
PICTURES = (".png", ".jpg", ".jpeg", ".webp")


def _video_files(entry: HistoryEntry) -> set[str]:
    """The files the run's video nodes wrote (a video file, or its PNG frames): shown once, as the poster."""
    nodes = entry.report.get("nodes", {}).values()
    return {f for n in nodes if "video_frames" in n.get("metrics", {}) for f in n.get("outputs", [])}


def one_line(text: str) -> str:
    """A text output as one line for the list (the view elides it; the tooltip holds the whole text)."""
    return " ".join(text.split())


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
        if line := figures_line(entry.report.get("figures", {})):
            tip += f"\n{line}"
        shown = False
        frames = set()
        if entry.poster and Path(entry.poster).is_file():  # a video: one row, its poster frame as the picture
            frames = _video_files(entry)
            video = next(iter(sorted(frames)), entry.poster)
            item = QListWidgetItem(
                QIcon(QPixmap.fromImage(QImage(entry.poster))), f"{caption}\n{Path(video).name}"
            )
            item.setData(Qt.ItemDataRole.UserRole + 1, entry.poster)  # dragged: the first frame, as a picture
            self._insert(item, index, f"{tip}\n{video}")
            shown = True
        for file in entry.files:
            if file in frames:
                continue
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
