"""The output dock: images (live previews while sampling, then the saved pictures), streamed LLM text and a
log of run messages.

Lives here: `OutputPanel`, `pil_to_qimage`. Imports Qt, PIL (through the images it is given),
`app.gui.video_player` (a saved video plays in the picture view, with play/pause and a scrub bar).
Clicking a saved picture shows it; double-clicking it (or "Open folder") opens its folder. Once a run has
saved a picture, that picture is the main view: a later final preview (a ControlNet's edge map) stays out
of it, and the run's end shows the last saved picture again. Opening another graph clears the dock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QIcon, QImage, QMouseEvent, QPixmap, QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.gui.elided_label import ElidedLabel
from app.gui.video_player import VideoPlayer, is_video_file

PLACEHOLDER = "Images appear here while a run draws them."
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
PREVIEW_ROLE = Qt.ItemDataRole.UserRole + 1  # a strip item's QImage when it is a Preview Image's picture


def pil_to_qimage(image: Any) -> QImage:
    rgba = image.convert("RGBA")
    data = rgba.tobytes("raw", "RGBA")
    return QImage(data, rgba.width, rgba.height, rgba.width * 4, QImage.Format.Format_RGBA8888).copy()


class ImageView(QLabel):
    """A picture scaled to fit, keeping its aspect ratio, pixelated when enlarged (tiny demo images)."""

    double_clicked = Signal()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        self.double_clicked.emit()

    def __init__(self) -> None:
        super().__init__()
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(120, 120)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self.setStyleSheet("background: #151618; border-radius: 4px; color: #9aa0a6;")
        self.setText(PLACEHOLDER)
        self._image: QImage | None = None

    def set_image(self, image: QImage) -> None:
        self._image = image
        self._rescale()

    def clear_image(self) -> None:
        self._image = None
        self.clear()
        self.setText(PLACEHOLDER)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._rescale()

    def _rescale(self) -> None:
        if self._image is None:
            return
        size = self.size() - QSize(8, 8)
        pixmap = QPixmap.fromImage(self._image)
        mode = (
            Qt.TransformationMode.FastTransformation
            if size.width() > 2 * self._image.width()
            else Qt.TransformationMode.SmoothTransformation
        )
        self.setPixmap(pixmap.scaled(size, Qt.AspectRatioMode.KeepAspectRatio, mode))


def _shown(file: Path) -> bool:
    """A saved file the dock shows: a picture or a video."""
    return file.suffix.lower() in PICTURE_SUFFIXES or is_video_file(file)


def is_picture_file(path: str | Path) -> bool:
    return Path(path).suffix.lower() in PICTURE_SUFFIXES


class OutputPanel(QTabWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.previews = 0  # how many live previews arrived in this run (tests check it)
        self.text_by_node: dict[str, str] = {}
        self._saved: tuple[str, Path] | None = None  # this run's last saved picture: (node, file)
        # Images tab.
        images = QWidget()
        layout = QVBoxLayout(images)
        layout.setContentsMargins(4, 4, 4, 4)
        self.caption = ElidedLabel("")  # a long file name must not widen the dock
        self.caption.setObjectName("hint")
        self.view = ImageView()
        self.view.setToolTip("Double-click to open the output folder")
        self.view.double_clicked.connect(lambda: self._open_folder(self.last_folder))
        self.files = QListWidget()
        self.files.setViewMode(QListWidget.ViewMode.IconMode)
        self.files.setIconSize(QSize(56, 56))
        self.files.setFixedHeight(84)
        self.files.setFlow(QListWidget.Flow.LeftToRight)
        self.files.setWrapping(False)
        self.files.setVisible(False)  # shown once a picture is saved
        self.files.itemClicked.connect(self._show_file)
        self.files.itemDoubleClicked.connect(self._open_folder_of)
        row = QHBoxLayout()
        row.addWidget(self.caption, 1)
        self.open_button = QPushButton("Open folder")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(lambda: self._open_folder(self.last_folder))
        row.addWidget(self.open_button)
        self.player = VideoPlayer(self.view)
        self.player.setVisible(False)  # shown while a saved video is the main view
        layout.addWidget(self.view, 1)
        layout.addWidget(self.player)
        layout.addLayout(row)
        layout.addWidget(self.files)
        self.last_folder: Path | None = None
        self.addTab(images, "Images")
        # Text and log tabs.
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlaceholderText("Text from LLM and Show Text nodes streams here, token by token.")
        self.addTab(self.text, "Text")
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)
        self.addTab(self.log, "Log")
        self._text_node: str | None = None

    # -- feeding ----------------------------------------------------------------------------------

    def new_run(self) -> None:
        self.previews = 0
        self.text_by_node.clear()
        self._text_node = None
        self._saved = None  # this run's last saved picture: (node, file)

    def clear_outputs(self) -> None:
        """Another graph was opened: its outputs are not this one's (the output history keeps them)."""
        self.new_run()
        self.files.clear()
        self.files.setVisible(False)
        self.text.clear()
        self.caption.setText("")
        self._hide_player()
        self.view.clear_image()
        self.last_folder = None
        self.open_button.setEnabled(False)

    def finish_run(self, cached: Sequence[tuple[str, str]] = ()) -> None:
        """A run ended: the picture it saved is the result to look at, whatever previews came after it.

        `cached` lists (node, file) that cached save nodes hold from an earlier run: when this run saved
        nothing new, the last of those pictures is the result (not a side branch's preview).
        """
        if self._saved is None:
            pictures = [(node, Path(f)) for node, f in cached if _shown(Path(f))]
            if pictures and pictures[-1][1].is_file():
                self._saved = pictures[-1]
        if self._saved is not None:
            self._show_saved(*self._saved)

    def _show_saved(self, node_id: str, file: Path) -> None:
        if is_video_file(file):
            self._show_video(file, f"{node_id}: {file.name}")
            return
        self._hide_player()
        image = QImage(str(file))
        self.view.set_image(image)
        self.caption.setText(f"{node_id}: {file.name}  ({image.width()}×{image.height()})")

    def show_preview(self, node_id: str, image: Any, final: bool) -> None:
        self.previews += 0 if final else 1
        if final and self._saved is not None:
            return  # a side branch's last look (an edge map) does not cover the saved result
        self._hide_player()
        qimage = pil_to_qimage(image)
        self.view.set_image(qimage)
        self.caption.setText(
            f"{node_id}: {'final' if final else 'preview'} {qimage.width()}×{qimage.height()}"
        )

    def add_file(self, node_id: str, path: str) -> None:
        file = Path(path)
        self.last_folder = file.parent
        self.open_button.setEnabled(True)
        video = is_video_file(file)
        if not video and file.suffix.lower() not in PICTURE_SUFFIXES:
            self.add_log(f"{node_id} wrote {file}")
            return
        if video and self.player.load(file) is not None:
            self.add_log(f"{node_id} wrote {file}")  # a video the player cannot read: listed, not shown
            return
        image = self.player.frames[0] if video else QImage(str(file))
        item = QListWidgetItem(QIcon(QPixmap.fromImage(image)), "")
        item.setToolTip(f"{file}\nclick to view, double-click to open its folder")
        item.setData(Qt.ItemDataRole.UserRole, str(file))
        self.files.insertItem(0, item)
        self.files.setVisible(True)
        self._saved = (node_id, file)
        self._show_saved(node_id, file)
        self.setCurrentIndex(0)

    def add_preview_picture(self, node_id: str, image: Any) -> None:
        """A Preview Image node's picture (never written to a file) in the strip beside the saved ones; it
        does not replace the saved result in the big view."""
        qimage = pil_to_qimage(image)
        item = QListWidgetItem(QIcon(QPixmap.fromImage(qimage)), "")
        item.setToolTip(f"{node_id}: preview {qimage.width()}×{qimage.height()} (not saved)\nclick to view")
        item.setData(PREVIEW_ROLE, qimage)
        item.setData(Qt.ItemDataRole.UserRole, f"{node_id}: preview")
        self.files.insertItem(0, item)
        self.files.setVisible(True)

    def append_text(self, node_id: str, delta: str) -> None:
        if self._text_node != node_id:
            if self.text.toPlainText():
                self.text.appendPlainText("")
            self.text.appendPlainText(f"── {node_id} ──")
            self.text.appendPlainText("")
            self._text_node = node_id
        self.text_by_node[node_id] = self.text_by_node.get(node_id, "") + delta
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(delta)
        self.text.setTextCursor(cursor)
        self.text.ensureCursorVisible()

    def add_log(self, message: str) -> None:
        self.log.appendPlainText(f"{time.strftime('%H:%M:%S')}  {message}")

    # -- actions ----------------------------------------------------------------------------------

    def _show_file(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        preview = item.data(PREVIEW_ROLE)
        if isinstance(preview, QImage):  # a Preview Image picture: kept in memory, not in a file
            self._hide_player()
            self.view.set_image(preview)
            self.caption.setText(f"{path} {preview.width()}×{preview.height()}")
            return
        if is_video_file(Path(path)):
            self._show_video(Path(path), Path(path).name)
            return
        self._hide_player()
        self.view.set_image(QImage(path))
        self.caption.setText(Path(path).name)

    def _show_video(self, file: Path, caption: str) -> None:
        if self.player.path != file and self.player.load(file) is not None:
            self.caption.setText(f"{caption}: cannot be played")
            return
        self.player.setVisible(True)
        self.player.show_frame(self.player.slider.value())
        count = f"{len(self.player.frames)}{'+' if self.player.truncated else ''} frames"
        self.caption.setText(f"{caption}  ({count})")

    def _hide_player(self) -> None:
        self.player.pause()
        self.player.setVisible(False)

    def _open_folder_of(self, item: QListWidgetItem) -> None:
        if isinstance(item.data(PREVIEW_ROLE), QImage):
            return  # no file, no folder
        self._open_folder(Path(item.data(Qt.ItemDataRole.UserRole)).parent)

    def _open_folder(self, folder: Path | None) -> None:
        if folder is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder.resolve())))
