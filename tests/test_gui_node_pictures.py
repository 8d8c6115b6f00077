"""Save Image and Preview Image show their last picture on the node (as ComfyUI does)."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QApplication, QStyleOptionGraphicsItem

from app.gui.node_item import NodeItem
from app.gui.node_thumbnail import thumbnail_rect
from tests.gui_support import make_window


def wait_until(condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds; sleeps between rounds so the run thread gets the GIL."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


def render(item: NodeItem) -> QImage:
    rect = item.boundingRect()
    image = QImage(int(rect.width()), int(rect.height()), QImage.Format.Format_ARGB32)
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    painter.translate(-rect.topLeft())
    item.paint(painter, QStyleOptionGraphicsItem(), None)
    painter.end()
    return image


def test_preview_and_save_nodes_show_their_picture(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    scene = window.scene
    load = scene.add_node("LoadImage", QPointF(0, 0))
    window.model.set_param(load, "path", "builtin:shapes_sample.png")
    preview = scene.add_node("PreviewImage", QPointF(300, 0))
    save = scene.add_node("SaveImage", QPointF(300, 300))
    assert scene.try_connect(load, "image", preview, "image")
    assert scene.try_connect(load, "image", save, "image")
    item = scene.node_items[preview]
    height_before = item.boundingRect().height()
    assert window.run_workflow()
    wait_until(lambda: not window.runner.running and window.last_result is not None)
    assert window.last_result.ok, window.last_result.error
    for nid in (preview, save):
        thumb = scene.node_items[nid].thumbnail
        assert thumb is not None and (thumb.width(), thumb.height()) == (64, 64), nid
    assert item.boundingRect().height() > height_before  # the node grew to hold it
    # The picture is painted on the node: the thumbnail's centre has the picture's centre colour.
    target = thumbnail_rect(item._expanded_height - 4, item.width, item.thumbnail)
    painted = render(item)
    at = target.center() - item.boundingRect().topLeft()
    seen = painted.pixelColor(int(at.x()), int(at.y()))
    want = item.thumbnail.pixelColor(32, 32)
    # Smooth scaling and antialiasing blend neighbours: a few levels of 255 either way.
    assert (
        max(abs(seen.red() - want.red()), abs(seen.green() - want.green()), abs(seen.blue() - want.blue()))
        < 24
    )
