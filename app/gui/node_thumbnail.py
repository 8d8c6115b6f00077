"""The last picture of a Save or Preview node, painted on the node below its rows (as ComfyUI shows it).

Lives here: `THUMB_H`, `paint_thumbnail`, `thumbnail_image`. Imports Qt, `app.gui.theme`.
The node item keeps the picture (a QImage) and grows by `THUMB_H` while it has one; the picture is scaled
to fit keeping its aspect ratio, pixelated when enlarged (the tiny demo pictures are 64 px).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter

from app.gui import theme

THUMB_H = 180.0  # room under the rows; the node's width is the other bound
MARGIN = 8.0


def thumbnail_image(image: Any) -> QImage:
    """A QImage from a PIL picture (what a node's preview event carries) or a QImage."""
    if isinstance(image, QImage):
        return image
    rgba = image.convert("RGBA")
    data = rgba.tobytes("raw", "RGBA")
    return QImage(data, rgba.width, rgba.height, rgba.width * 4, QImage.Format.Format_RGBA8888).copy()


def thumbnail_rect(top: float, width: float, image: QImage) -> QRectF:
    """Where the picture goes: centred in the box under the rows, aspect ratio kept."""
    box = QRectF(MARGIN, top + 2, width - 2 * MARGIN, THUMB_H - MARGIN - 2)
    if image.width() <= 0 or image.height() <= 0:
        return box
    scale = min(box.width() / image.width(), box.height() / image.height())
    w, h = image.width() * scale, image.height() * scale
    return QRectF(box.center().x() - w / 2, box.top() + (box.height() - h) / 2, w, h)


def paint_thumbnail(painter: QPainter, top: float, width: float, image: QImage) -> None:
    target = thumbnail_rect(top, width, image)
    painter.fillRect(target.adjusted(-1, -1, 1, 1), QColor(theme.BACKGROUND))
    enlarged = target.width() > image.width()
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, not enlarged)
    painter.drawImage(target, image)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
    painter.setPen(QColor(theme.NODE_BORDER))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRect(target)
