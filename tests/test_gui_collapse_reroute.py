"""Collapsing nodes (and a group's nodes) to their title bars, and reroute dots on wires, as a user sees
them: what the canvas draws, where wires meet, what Save writes, what undo brings back, what a run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPointF, Qt

from app.gui.main_window import MainWindow
from app.gui.node_item import HEADER
from app.gui.reroute_item import RerouteItem
from nodes.types import LATENT, VAE
from nodes.workflow import Link, load_workflow
from tests import gui_support
from tests.test_gui_editor import drag, insert
from tests.test_gui_staples import run_and_read
from tests.test_gui_staples import window as staples_window  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    win = gui_support.make_window(qtbot, tmp_path, registry)
    win.set_workflow(load_workflow(REPO / "resources/workflows/txt2img.json", registry), None)
    win.view.fit()
    return win


def wire_end(window: MainWindow, out_node: str, in_node: str) -> QPointF:
    """Where the drawn wire from `out_node` into `in_node` ends."""
    edge = next(
        e for c, e in window.scene.edge_items.items() if (c.out_node, c.in_node) == (out_node, in_node)
    )
    return edge.mapToScene(edge.path().currentPosition())


def double_click(qtbot, window: MainWindow, at: QPointF) -> None:
    qtbot.mouseDClick(window.view.viewport(), Qt.MouseButton.LeftButton, pos=window.view.mapFromScene(at))


def test_collapse_shows_the_title_bar_only_and_is_saved_and_undoable(
    qtbot, window: MainWindow, tmp_path: Path
) -> None:
    sampler = window.scene.node_items["sampler"]
    full_height = sampler.rect().height()
    latent_port = sampler.port("latent", "in").scenePos()
    assert wire_end(window, "latent", "sampler") == latent_port
    window.scene.clearSelection()
    sampler.setSelected(True)
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_C, Qt.KeyboardModifier.AltModifier)
    assert sampler.is_collapsed()
    assert sampler.rect().height() == HEADER < full_height
    assert not sampler.port("latent", "in").isVisible()  # no rows, no ports: the title bar only
    # Every wire now meets the title bar: inputs at its left end, the output at its right end.
    title_left = sampler.scenePos() + QPointF(0, HEADER / 2)
    assert wire_end(window, "latent", "sampler") == title_left
    assert wire_end(window, "positive", "sampler") == title_left
    decode_edge = next(e for c, e in window.scene.edge_items.items() if c.out_node == "sampler")
    assert decode_edge.path().elementAt(0).x == sampler.scenePos().x() + sampler.rect().width()
    # Saved in the workflow, and it opens collapsed.
    path = tmp_path / "collapsed.json"
    assert window.save_to(path)
    assert json.loads(path.read_text())["ui"]["nodes"]["sampler"]["collapsed"] is True
    assert window.open_path(path, confirm=False)
    assert window.scene.node_items["sampler"].is_collapsed()
    assert window.scene.node_items["sampler"].rect().height() == HEADER
    # One undo step expands it again, wires back on their ports.
    window.set_workflow(load_workflow(REPO / "resources/workflows/txt2img.json", window.registry), None)
    sampler = window.scene.node_items["sampler"]
    window.scene.toggle_collapsed(["sampler"])
    assert sampler.is_collapsed()
    window.undo_stack.undo()
    assert not sampler.is_collapsed() and sampler.rect().height() == full_height
    assert wire_end(window, "latent", "sampler") == sampler.port("latent", "in").scenePos()
    window.undo_stack.redo()
    assert sampler.is_collapsed()


def test_double_click_on_the_title_collapses_and_expands(qtbot, window: MainWindow) -> None:
    decode = window.scene.node_items["decode"]
    on_title = decode.scenePos() + QPointF(decode.rect().width() / 2, HEADER / 2)
    double_click(qtbot, window, on_title)
    assert decode.is_collapsed()
    assert not window.palette.isVisible()  # the double-click was the node's, not the empty canvas's
    double_click(qtbot, window, on_title)
    assert not decode.is_collapsed()
    body = decode.scenePos() + QPointF(decode.rect().width() / 2, decode.rect().height() - 10)
    double_click(qtbot, window, body)  # the body is not the title bar: nothing folds
    assert not decode.is_collapsed()


def test_collapse_a_group_folds_all_its_nodes(qtbot, window: MainWindow) -> None:
    window.scene.clearSelection()
    for nid in ("positive", "negative"):
        window.scene.node_items[nid].setSelected(True)
    window.scene.group_selection("Prompts")
    window.scene.clearSelection()
    window.scene.group_items[-1].setSelected(True)  # the new one (the example has its own groups)
    count = window.undo_stack.count()
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_C, Qt.KeyboardModifier.AltModifier)
    folded = {nid for nid, item in window.scene.node_items.items() if item.is_collapsed()}
    assert folded == {"positive", "negative"}
    assert window.undo_stack.count() == count + 1  # the whole group in one step
    window.undo_stack.undo()
    assert not any(item.is_collapsed() for item in window.scene.node_items.values())


def test_double_click_on_a_wire_drops_a_reroute_dot_that_splits_it(qtbot, window: MainWindow) -> None:
    (vae_link,) = [c for c in window.model.connections() if (c.in_node, c.in_port) == ("decode", "vae")]
    edge = window.scene.edge_items[vae_link]
    middle = edge.mapToScene(edge.path().pointAtPercent(0.5))
    count = window.undo_stack.count()
    double_click(qtbot, window, middle)
    (dot,) = [nid for nid, item in window.scene.node_items.items() if isinstance(item, RerouteItem)]
    item = window.scene.node_items[dot]
    assert item.sceneBoundingRect().contains(middle)  # where the user clicked
    assert window.model.input_link(dot, "input") == Link(vae_link.out_node, vae_link.out_port)
    assert window.model.input_link("decode", "vae").node == dot
    assert item.color().name() == VAE.color  # the dot shows the type it carries
    assert window.undo_stack.count() == count + 1
    # It can be dragged like a node.
    before = window.model.pos(dot)
    drag(
        qtbot, window, item.sceneBoundingRect().center(), item.sceneBoundingRect().center() + QPointF(60, 40)
    )
    after = window.model.pos(dot)
    assert (after[0] - before[0], after[1] - before[1]) == pytest.approx((60, 40), abs=2)  # zoom rounding
    assert wire_end(window, dot, "decode") == window.scene.node_items["decode"].port("vae", "in").scenePos()
    # A VAE dot refuses a LATENT input, saying why.
    ok = window.scene.try_connect(dot, "output", "sampler", "latent")[0]
    assert (
        not ok
        and f"gives {VAE.name}" in window.scene.last_refusal
        and LATENT.name in window.scene.last_refusal
    )
    # Undo: the plain wire is back, the dot is gone.
    window.undo_stack.undo()  # the drag
    window.undo_stack.undo()  # the reroute
    assert dot not in window.model.node_ids()
    assert vae_link in window.model.connections()


def test_reroute_from_the_palette_and_saved(qtbot, window: MainWindow, tmp_path: Path) -> None:
    dot = insert(qtbot, window, "reroute", 200, 500)
    assert window.model.node(dot).type == "Reroute"
    assert isinstance(window.scene.node_items[dot], RerouteItem)
    assert window.scene.try_connect("sampler", "latent", dot, "input")[0]
    assert window.scene.try_connect(dot, "output", "decode", "latent")[0]
    path = tmp_path / "rerouted.json"
    assert window.save_to(path)
    saved = json.loads(path.read_text())
    assert saved["nodes"]["decode"]["inputs"]["latent"] == [dot, "output"]
    assert load_workflow(path, window.registry).nodes[dot].type == "Reroute"  # valid as saved


def test_a_run_passes_values_through_a_reroute(qtbot, staples_window: MainWindow, tmp_path: Path) -> None:  # noqa: F811
    window = staples_window
    (link,) = [c for c in window.model.connections() if c.in_node == "text"]
    edge = window.scene.edge_items[link]
    window.scene.insert_reroute(link, edge.mapToScene(edge.path().pointAtPercent(0.5)))
    assert any(isinstance(i, RerouteItem) for i in window.scene.node_items.values())
    assert run_and_read(window, tmp_path / "outputs") == ["7"]


def test_a_collapsed_node_stays_collapsed_through_copy_paste_and_undone_delete(window: MainWindow) -> None:
    window.scene.toggle_collapsed(["decode"])
    window.rename_node("decode", "Decode to pixels")
    window.toggle_mode("bypass", ["decode"])
    window.scene.clearSelection()
    window.scene.node_items["decode"].setSelected(True)
    (copy,) = window.duplicate()
    assert window.scene.node_items[copy].is_collapsed()
    assert window.scene.node_items[copy].rect().height() == HEADER
    window.scene.clearSelection()
    window.scene.node_items["decode"].setSelected(True)
    window.scene.delete_selected()
    window.undo_stack.undo()
    assert window.scene.node_items["decode"].is_collapsed()
    # Its title and bypass come back with it too (they used to be lost by an undone delete).
    assert (window.scene.node_items["decode"].title(), window.scene.node_items["decode"].mode()) == (
        "Decode to pixels",
        "bypass",
    )
    assert wire_end(window, "sampler", "decode") == window.scene.node_items["decode"].scenePos() + QPointF(
        0, HEADER / 2
    )


def test_a_wire_dropped_on_a_collapsed_node_connects(qtbot, window: MainWindow) -> None:
    preview = window.scene.add_node("PreviewImage", QPointF(1200, 450))
    window.scene.toggle_collapsed([preview])
    item = window.scene.node_items[preview]
    assert item.rect().height() == HEADER
    start = window.scene.node_items["decode"].port("image", "out").scenePos()
    drag(qtbot, window, start, item.sceneBoundingRect().center())
    assert window.model.input_link(preview, "image") is not None
    assert wire_end(window, "decode", preview) == item.scenePos() + QPointF(0, HEADER / 2)
