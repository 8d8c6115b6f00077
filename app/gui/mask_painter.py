"""The mask painter: paint the region to repaint on a picture; saved as the picture's alpha channel.

Lives here: `MaskCanvas`, `MaskPainterDialog`, `mask_file_for`. Imports Qt, PIL and numpy only.

The mask is saved where every inpainting node already looks for it: a copy of the picture next to it
(`NAME.mask.png`) whose transparent pixels are the painted region, exactly what Load Image reads as its
MASK output (and what ComfyUI's Load Image does). Reopening that file shows the mask again, so it
round-trips through the workflow, which only stores the file's path. Strokes are undoable (Ctrl+Z).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QImage, QKeySequence, QMouseEvent, QPainter, QPaintEvent, QShortcut
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

_OVERLAY = QColor(255, 64, 64, 140)
_MAX_UNDO = 50


def mask_file_for(image_path: Path) -> Path:
    """Where the painted mask of `image_path` is saved: `photo.png` -> `photo.mask.png` (stable on re-save)."""
    stem = image_path.stem.removesuffix(".mask")
    return image_path.with_name(f"{stem}.mask.png")


class MaskCanvas(QWidget):
    """The picture scaled to fit, the mask painted over it in translucent red."""

    changed = Signal()

    def __init__(self, picture: Image.Image, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        rgba = picture.convert("RGBA")
        self._rgb = rgba.convert("RGB")
        data = self._rgb.tobytes("raw", "RGB")
        self._image = QImage(
            data, rgba.width, rgba.height, 3 * rgba.width, QImage.Format.Format_RGB888
        ).copy()
        # 255 = repaint. An existing alpha channel is an existing mask (transparent = repaint).
        alpha = rgba.getchannel("A").point(lambda a: 255 - a)
        self.mask = QImage(
            alpha.tobytes(), rgba.width, rgba.height, rgba.width, QImage.Format.Format_Grayscale8
        ).copy()
        self.brush = max(2, min(rgba.width, rgba.height) // 12)
        self.erasing = False
        self._undo: list[QImage] = []
        self._last: QPointF | None = None
        self.setMinimumSize(256, 256)
        self.setCursor(Qt.CursorShape.CrossCursor)

    # -- geometry -------------------------------------------------------------------------------------
    def _target(self) -> QRectF:
        w, h = self._image.width(), self._image.height()
        scale = min(self.width() / w, self.height() / h)
        return QRectF((self.width() - w * scale) / 2, (self.height() - h * scale) / 2, w * scale, h * scale)

    def to_image(self, pos: QPointF) -> QPointF:
        t = self._target()
        return QPointF(
            (pos.x() - t.x()) * self._image.width() / t.width(),
            (pos.y() - t.y()) * self._image.height() / t.height(),
        )

    # -- editing --------------------------------------------------------------------------------------
    def _remember(self) -> None:
        self._undo.append(self.mask.copy())
        del self._undo[:-_MAX_UNDO]

    def _stroke(self, a: QPointF, b: QPointF) -> None:
        painter = QPainter(self.mask)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        pen_color = QColor(0, 0, 0) if self.erasing else QColor(255, 255, 255)
        pen = painter.pen()
        pen.setColor(pen_color)
        pen.setWidthF(float(self.brush))
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        painter.setPen(pen)
        painter.drawLine(a, b)
        painter.end()
        self.update()
        self.changed.emit()

    def undo(self) -> bool:
        if not self._undo:
            return False
        self.mask = self._undo.pop()
        self.update()
        self.changed.emit()
        return True

    def clear(self) -> None:
        self._remember()
        self.mask.fill(0)
        self.update()
        self.changed.emit()

    def invert(self) -> None:
        self._remember()
        self.mask.invertPixels()
        self.update()
        self.changed.emit()

    def painted_pixels(self) -> int:
        return int((np.frombuffer(self._mask_bytes(), dtype=np.uint8) >= 128).sum())

    def _mask_bytes(self) -> bytes:
        # QImage rows are 32-bit aligned; copy row by row to a tight buffer.
        w, h = self.mask.width(), self.mask.height()
        bits = bytes(self.mask.constBits())
        stride = self.mask.bytesPerLine()
        return b"".join(bits[y * stride : y * stride + w] for y in range(h))

    def picture_with_mask(self) -> Image.Image:
        """The picture as RGBA: alpha 0 where painted (repaint), 255 elsewhere."""
        mask = Image.frombytes("L", (self.mask.width(), self.mask.height()), self._mask_bytes())
        picture = self._rgb.copy()
        picture.putalpha(mask.point(lambda v: 0 if v >= 128 else 255))
        return picture

    # -- Qt events ------------------------------------------------------------------------------------
    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        if event.button() == Qt.MouseButton.LeftButton:
            self._remember()
            self._last = self.to_image(event.position())
            self._stroke(self._last, self._last)
            event.accept()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._last is not None and event.buttons() & Qt.MouseButton.LeftButton:
            point = self.to_image(event.position())
            self._stroke(self._last, point)
            self._last = point

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self._last = None

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(30, 30, 30))
        target = self._target()
        painter.drawImage(target, self._image)
        painter.drawImage(target, self._overlay())
        painter.end()

    def _overlay(self) -> QImage:
        """The mask as translucent red (RGBA), transparent where nothing is painted."""
        w, h = self.mask.width(), self.mask.height()
        mask = np.frombuffer(self._mask_bytes(), dtype=np.uint8).reshape(h, w)
        rgba = np.empty((h, w, 4), dtype=np.uint8)
        rgba[..., 0], rgba[..., 1], rgba[..., 2] = _OVERLAY.red(), _OVERLAY.green(), _OVERLAY.blue()
        rgba[..., 3] = (mask.astype(np.uint16) * _OVERLAY.alpha() // 255).astype(np.uint8)
        return QImage(rgba.tobytes(), w, h, 4 * w, QImage.Format.Format_RGBA8888).copy()


class MaskPainterDialog(QDialog):
    """Brush, eraser, size, invert, clear, undo; Save writes `NAME.mask.png` and returns its path."""

    def __init__(
        self, image_path: Path, parent: QWidget | None = None, *, save_dir: Path | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Paint mask: {image_path.name}")
        self.image_path = image_path
        self.save_dir = save_dir  # None: next to the picture
        self.saved_path: Path | None = None
        with Image.open(image_path) as picture:
            picture.load()
            self.canvas = MaskCanvas(picture, self)

        tools = QHBoxLayout()
        self.brush_button = QPushButton("Brush (B)")
        self.eraser_button = QPushButton("Eraser (E)")
        group = QButtonGroup(self)
        for button in (self.brush_button, self.eraser_button):
            button.setCheckable(True)
            group.addButton(button)
            tools.addWidget(button)
        self.brush_button.setChecked(True)
        self.brush_button.toggled.connect(lambda on: setattr(self.canvas, "erasing", not on))
        tools.addWidget(QLabel("Size"))
        self.size_slider = QSlider(Qt.Orientation.Horizontal)
        self.size_slider.setRange(1, 128)
        self.size_slider.setValue(self.canvas.brush)
        self.size_slider.valueChanged.connect(lambda v: setattr(self.canvas, "brush", v))
        tools.addWidget(self.size_slider, 1)
        for text, slot in (
            ("Invert", self.canvas.invert),
            ("Clear", self.canvas.clear),
            ("Undo", self.canvas.undo),
        ):
            button = QPushButton(text)
            button.clicked.connect(slot)
            tools.addWidget(button)

        buttons = QHBoxLayout()
        self.status = QLabel()
        buttons.addWidget(self.status, 1)
        cancel, save = QPushButton("Cancel"), QPushButton("Save mask")
        save.setDefault(True)
        cancel.clicked.connect(self.reject)
        save.clicked.connect(self.save)
        buttons.addWidget(cancel)
        buttons.addWidget(save)

        layout = QVBoxLayout(self)
        layout.addLayout(tools)
        layout.addWidget(self.canvas, 1)
        layout.addLayout(buttons)
        QShortcut(QKeySequence.StandardKey.Undo, self, activated=self.canvas.undo)
        QShortcut(QKeySequence("B"), self, activated=lambda: self.brush_button.setChecked(True))
        QShortcut(QKeySequence("E"), self, activated=lambda: self.eraser_button.setChecked(True))
        self.canvas.changed.connect(self._update_status)
        self._update_status()
        self.resize(640, 700)

    def _update_status(self) -> None:
        total = self.canvas.mask.width() * self.canvas.mask.height()
        self.status.setText(
            f"{self.canvas.painted_pixels() * 100 / total:.1f} % of the picture will be repainted"
        )

    def save(self) -> None:
        """Write the masked picture atomically next to the original, then close with Accepted."""
        target = mask_file_for(self.image_path)
        if self.save_dir is not None:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            target = self.save_dir / target.name
        fd, tmp = tempfile.mkstemp(prefix=".nodeloom-", suffix=".png.tmp", dir=target.parent)
        os.close(fd)
        try:
            self.canvas.picture_with_mask().save(tmp, format="PNG")
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.saved_path = target
        self.accept()

    def point_for(self, x: float, y: float) -> QPoint:
        """Widget coordinates of picture pixel (x, y); for tests and scripted strokes."""
        t = self.canvas._target()
        w, h = self.canvas.mask.width(), self.canvas.mask.height()
        return QPoint(round(t.x() + (x + 0.5) * t.width() / w), round(t.y() + (y + 0.5) * t.height() / h))
