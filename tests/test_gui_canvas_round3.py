"""Canvas fixes from issue 29: the empty-canvas hint goes once anything is on it, Fit Graph keeps nodes
out from under the minimap, items paint inside their bounding rects (no specks when dragged), long captions
do not widen the docks, a clamped cfg shows 0 (not -0), Load LoRA's id is load_lora, and a saved picture
embeds the reroute dots."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QApplication, QGraphicsItem, QStyle, QStyleOptionGraphicsItem

from app.gui.node_item import NodeRunState, format_value
from nodes.png import read_embedded_workflow
from tests.gui_support import make_window


def wait_until(condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds; sleeps between rounds so the run thread gets the GIL."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


def painted_outside(item: QGraphicsItem) -> int:
    """How many pixels `item` paints outside its own boundingRect (rendered at 2x, with a wide margin)."""
    rect, margin, scale = item.boundingRect(), 20, 2
    image = QImage(
        int((rect.width() + 2 * margin) * scale),
        int((rect.height() + 2 * margin) * scale),
        QImage.Format.Format_ARGB32,
    )
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    painter.scale(scale, scale)
    painter.translate(margin - rect.left(), margin - rect.top())
    option = QStyleOptionGraphicsItem()
    if item.isSelected():
        option.state |= QStyle.StateFlag.State_Selected
    item.paint(painter, option, None)
    painter.end()
    inside = QRectF(margin, margin, rect.width(), rect.height())
    count = 0
    for y in range(image.height()):
        for x in range(0, image.width()):
            if image.pixelColor(x, y).alpha() and not inside.contains(
                QPointF((x + 0.5) / scale, (y + 0.5) / scale)
            ):
                count += 1
    return count


@pytest.mark.slow  # over 5 s in the fast lane on a loaded 2-core machine
def test_hint_fit_and_paint_bounds(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    assert window.view.shows_hint()
    window.model.add_group("Group", [0, 0, 300, 200])
    QApplication.processEvents()
    assert not window.view.shows_hint()  # a group alone is not an empty canvas
    scene = window.scene
    nodes = [scene.add_node("Sampler", QPointF(x, y)) for x, y in ((0, 0), (900, 0), (900, 600), (0, 600))]
    window.resize(1200, 800)
    QApplication.processEvents()
    window.view.fit()
    box = window.minimap.geometry().translated(-window.view.viewport().pos())
    for nid in nodes:
        shown = window.view.mapFromScene(scene.node_items[nid].sceneBoundingRect()).boundingRect()
        assert not shown.intersects(box), nid
    # Selected, errored and plain items paint inside their bounding rects.
    item = scene.node_items[nodes[0]]
    item.setSelected(True)
    assert painted_outside(item) == 0
    item.set_state(NodeRunState("error", message="x"))
    assert painted_outside(item) == 0
    group = next(i for i in scene.items() if type(i).__name__ == "GroupItem")
    group.setSelected(True)
    assert painted_outside(group) == 0
    dot = scene.add_node("Reroute", QPointF(400, 400))
    scene.node_items[dot].setSelected(True)
    assert painted_outside(scene.node_items[dot]) == 0


def test_long_captions_keep_the_docks_narrow_and_cfg_shows_0(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    before = window.output.minimumSizeHint().width()
    window.output.caption.setText("save_image: " + "a_very_long_file_name_" * 20 + ".png (64×64)")
    queue_before = window.queue.minimumSizeHint().width()
    window.queue.set_running("txt2img.json (" + "sampler.seed=123456789, " * 30 + ")")
    assert window.output.minimumSizeHint().width() <= before
    assert window.queue.minimumSizeHint().width() <= queue_before
    sampler = window.scene.add_node("Sampler", QPointF(0, 0))
    window.scene.clearSelection()
    window.scene.node_items[sampler].setSelected(True)
    spin = window.inspector.editors["cfg"].editor
    spin.setFocus()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "-50")
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    value = window.model.node(sampler).params["cfg"]
    spec = window.registry["Sampler"]
    assert value == 0 and format_value(spec.param("cfg"), value) == "0"
    assert window.scene.add_node("LoadLoRA", QPointF(0, 300)) == "load_lora"


def test_a_saved_picture_embeds_the_reroute_dots(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    scene = window.scene
    load = scene.add_node("LoadImage", QPointF(0, 0))
    window.model.set_param(load, "path", "builtin:shapes_sample.png")
    save = scene.add_node("SaveImage", QPointF(500, 0))
    assert scene.try_connect(load, "image", save, "image")
    conn = next(c for c in window.model.connections() if c.in_node == save)
    dot = scene.insert_reroute(conn, QPointF(300, 40))
    assert dot is not None
    assert window.run_workflow()
    wait_until(lambda: not window.runner.running and window.last_result is not None)
    assert window.last_result.ok, window.last_result.error
    png = Path(window.last_result.nodes[save].files[0])
    embedded = read_embedded_workflow(png)
    assert embedded is not None and embedded["nodes"][dot]["type"] == "Reroute"
    assert embedded["nodes"][save]["inputs"]["image"][0] == dot
