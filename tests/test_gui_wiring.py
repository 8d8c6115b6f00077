"""Wiring feedback and the minimap: a release on a node where nothing fits says so at the cursor; the
minimap stays inside the canvas when docks change and can be hidden."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QToolTip

from tests.gui_support import make_window


def test_release_on_a_node_body_where_nothing_fits_says_why(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    load = window.scene.add_node("LoadDiffusionModel", QPointF(0, 0))
    save = window.scene.add_node("SaveText", QPointF(400, 0))
    origin = window.scene.node_items[load].port("vae", "out")
    window.scene.begin_wire(origin, origin.scenePos())
    body = window.scene.node_items[save].sceneBoundingRect().center()
    window.scene.end_wire(body)
    assert window.model.connections() == []
    message = window.statusBar().currentMessage()
    assert message == "Can't connect: Save Text has no input that takes VAE"
    assert QToolTip.isVisible() and QToolTip.text() == message  # shown at the cursor, not only below
    QToolTip.hideText()


def test_the_minimap_stays_inside_the_canvas_and_can_be_hidden(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.resizeDocks([window.inspector_dock], [700], Qt.Orientation.Horizontal)
    qtbot.wait(50)
    qtbot.waitUntil(
        lambda: window.view.viewport().geometry().contains(window.minimap.geometry()), timeout=2000
    )
    assert window.minimap.isVisible()
    window.minimap_action.trigger()
    assert not window.minimap.isVisible()
    again = make_window(qtbot, tmp_path, registry)  # the choice is remembered
    assert not again.minimap.isVisible()
