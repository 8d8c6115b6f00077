"""A small video player for the Output dock: the frames of a saved video with play/pause and a scrub bar.

Lives here: `VideoPlayer`, `frame_image`, `is_video_file`, `PLAYER_MAX_FRAMES`, `PLAYER_MAX_SIDE`. Imports Qt,
numpy, PIL, `nodes.video_read` (the frames). It paints into the dock's picture view, which it is given (the
dock, `app.gui.output_panel`, imports this module).

The whole clip is decoded once into small uint8 pictures (at most `PLAYER_MAX_SIDE` pixels a side, the first
`PLAYER_MAX_FRAMES` frames), so playing and scrubbing never touch the file again; sound is not played.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QVBoxLayout, QWidget

PLAYER_MAX_FRAMES = 600  # 25 s at 24 fps; a longer clip plays its start (the caption says so)
PLAYER_MAX_SIDE = 512  # 600 frames of 512x288 are ~265 MB as RGB


VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".mkv", ".gif")


def is_video_file(file: Path) -> bool:
    """A file the player shows: a video, or a webp with more than one frame (Save Video's webp)."""
    suffix = file.suffix.lower()
    if suffix in VIDEO_SUFFIXES:
        return True
    if suffix != ".webp":
        return False
    try:
        with Image.open(file) as image:
            return getattr(image, "n_frames", 1) > 1
    except (OSError, UnidentifiedImageError, ValueError):
        return False


def frame_image(picture: np.ndarray) -> QImage:
    """A uint8 (H, W, 3) picture as a QImage that owns its pixels."""
    height, width = picture.shape[:2]
    data = np.ascontiguousarray(picture)
    return QImage(data.data, width, height, width * 3, QImage.Format.Format_RGB888).copy()


class VideoPlayer(QWidget):
    """Shows one frame at a time in `view` (any widget with `set_image(QImage)`); Play loops the clip."""

    frame_shown = Signal(int)

    def __init__(self, view: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.frames: list[QImage] = []
        self.fps = 24.0
        self.path: Path | None = None
        self.truncated = False
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._tick)
        self.play_button = QPushButton("Play")
        self.play_button.setToolTip("Play or pause (the clip loops; sound is not played)")
        self.play_button.clicked.connect(self.toggle)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Drag to scrub through the frames")
        self.slider.valueChanged.connect(self.show_frame)
        self.position = QLabel("")
        self.position.setObjectName("hint")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.play_button)
        row.addWidget(self.slider, 1)
        row.addWidget(self.position)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)

    @property
    def playing(self) -> bool:
        return self.timer.isActive()

    def load(self, path: Path) -> str | None:
        """Decode `path` for playing; returns why it cannot be shown, or None."""
        from nodes.video_read import VideoFileError, read_frames

        self.pause()
        try:
            pictures, fps = read_frames(path, 0, PLAYER_MAX_FRAMES + 1, PLAYER_MAX_SIDE)
        except (VideoFileError, OSError) as exc:
            return str(exc)
        self.truncated = len(pictures) > PLAYER_MAX_FRAMES
        self.frames = [frame_image(p) for p in pictures[:PLAYER_MAX_FRAMES]]
        self.fps = fps
        self.path = Path(path)
        self.timer.setInterval(max(1, round(1000 / fps)))
        self.slider.blockSignals(True)
        self.slider.setRange(0, len(self.frames) - 1)
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        self.show_frame(0)
        return None

    def show_frame(self, index: int) -> None:
        if not self.frames:
            return
        index = min(max(index, 0), len(self.frames) - 1)
        if self.slider.value() != index:
            self.slider.blockSignals(True)
            self.slider.setValue(index)
            self.slider.blockSignals(False)
        self.view.set_image(self.frames[index])  # type: ignore[attr-defined]
        more = "+" if self.truncated else ""
        self.position.setText(f"{index + 1}/{len(self.frames)}{more} · {self.fps:g} fps")
        self.frame_shown.emit(index)

    def toggle(self) -> None:
        if self.playing:
            self.pause()
        elif self.frames:
            self.timer.start()
            self.play_button.setText("Pause")

    def pause(self) -> None:
        self.timer.stop()
        self.play_button.setText("Play")

    def _tick(self) -> None:
        self.show_frame((self.slider.value() + 1) % len(self.frames))
