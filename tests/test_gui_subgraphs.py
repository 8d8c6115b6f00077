"""Issue 29, subgraphs in the editor: select nodes -> Make Subgraph (Ctrl+Shift+G), open it (double-click) to
edit inside with a breadcrumb back, edits inside change every instance, promote an inner field (right-click
-> "Show on subgraph node") into the instance's inspector, save as a blueprint listed in the palette and add
it to any graph, expand it back; each step undoes and redoes. A ComfyUI file with subgraphs opens as
subgraphs and runs the graph its flattened import runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QUrl
from PySide6.QtWidgets import QApplication, QLabel, QMenu
from pytestqt.qtbot import QtBot

from app.gui.palette import BLUEPRINT_ROLE
from app.gui.subgraph_item import SubgraphNodeItem
from app.importing import import_file
from nodes.modes import prepare_run
from nodes.subgraph import expand_subgraphs
from nodes.workflow import Workflow, load_workflow
from tests.comfy_subgraph_fixtures import (
    prompt_widget_file,
    prompts_subgraph_file,
    run_signatures,
    shared_encode_file,
)
from tests.gui_support import make_window

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"

pytestmark = pytest.mark.slow  # each builds a main window (~0.6-1 s here)


def _window(qtbot: QtBot, tmp_path: Path, registry):  # noqa: ANN001, ANN202
    win = make_window(qtbot, tmp_path, registry)
    win.set_workflow(load_workflow(TXT2IMG, registry), None)
    return win


def _select(win, ids: list[str]) -> None:  # noqa: ANN001
    win.scene.clearSelection()
    for nid in ids:
        win.scene.node_items[nid].setSelected(True)


def _view_point(win, item, x: float, y: float) -> QPoint:  # noqa: ANN001
    """Where a point of `item` (its own coordinates) is in the view's viewport."""
    return win.view.mapFromScene(item.mapToScene(QPointF(x, y)))


def _text_of(wf: Workflow, node_type: str) -> list[str]:
    """The prompts of the `node_type` nodes a run would run (subgraphs expanded)."""
    flat = expand_subgraphs(wf)
    return sorted(n.params["text"] for n in flat.nodes.values() if n.type == node_type)


def test_make_subgraph_with_the_shortcut_then_undo_and_redo(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = _window(qtbot, tmp_path, registry)
    before = win.model.to_workflow().to_dict()
    _select(win, ["positive", "negative"])
    win.view.setFocus()
    qtbot.keyClick(
        win.view, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    )
    (instance,) = [nid for nid in win.model.node_ids() if nid not in before["nodes"]]
    assert "positive" not in win.model.node_ids() and "negative" not in win.model.node_ids()
    item = win.scene.node_items[instance]
    assert isinstance(item, SubgraphNodeItem) and item.isSelected()
    # Its ports are what crosses the selection's border: the text encoder in, two conditionings out.
    assert list(item.inputs) == ["text_encoder"]
    assert len(item.outputs) == 2
    sampler = win.model.node("sampler").inputs
    assert {sampler["positive"].node, sampler["negative"].node} == {instance}
    assert win.undo_stack.undoText() == "Make subgraph of 2 nodes"
    # ComfyUI's own key for it works too.
    assert "Ctrl+Shift+E" in [k.toString() for k in win.subgraph_ops.make_action.shortcuts()]
    win.undo_stack.undo()
    assert win.model.to_workflow().to_dict() == before
    win.undo_stack.redo()
    assert instance in win.model.node_ids() and win.model.to_workflow().subgraphs


def test_open_edit_inside_changes_every_instance_and_the_breadcrumb_goes_back(
    qtbot: QtBot, tmp_path: Path, registry
) -> None:
    win = _window(qtbot, tmp_path, registry)
    _select(win, ["positive"])
    instance = win.subgraph_ops.make_subgraph()
    copy = win.duplicate()[0]  # a second instance of the same definition
    assert win.model.node(copy).type == win.model.node(instance).type
    item = win.scene.node_items[copy]  # on top (a duplicate lands 40 px down and right)
    win.view.centerOn(item)
    qtbot.mouseDClick(
        win.view.viewport(), Qt.MouseButton.LeftButton, pos=_view_point(win, item, 100, item.height - 40)
    )
    assert win.model.depth() == 1 and win.model.node_ids() == ["positive"]
    crumb = win.subgraph_ops.breadcrumb
    assert crumb.isVisible() and crumb.text() == "Graph > New Subgraph"
    assert win.model.to_workflow().nodes.keys() >= {
        instance,
        copy,
    }  # a save while inside saves the whole graph
    win.show_in_inspector("positive")
    win.inspector.editors["text"].changed.emit("a blue circle")  # typed in the inspector
    qtbot.mouseClick(crumb.crumbs[0], Qt.MouseButton.LeftButton)  # "Graph"
    assert win.model.depth() == 0 and not crumb.isVisible()
    assert set(win.model.node_ids()) >= {instance, copy, "negative", "sampler"}
    original = load_workflow(TXT2IMG, registry).nodes["positive"].params["text"]
    assert _text_of(win.model.to_workflow(), "TextEncode") == sorted(
        ["a blue circle", "a blue circle", load_workflow(TXT2IMG, registry).nodes["negative"].params["text"]]
    )
    # Undo: back inside (the edit was made there), then the edit goes, then out again.
    assert win.undo_stack.undoText() == "Back to Graph"
    win.undo_stack.undo()
    assert win.model.depth() == 1 and crumb.text() == "Graph > New Subgraph"
    win.undo_stack.undo()
    assert win.model.node("positive").params["text"] == original
    win.undo_stack.undo()
    assert win.model.depth() == 0
    assert original in _text_of(win.model.to_workflow(), "TextEncode")
    for _ in range(3):
        win.undo_stack.redo()
    assert (
        win.model.depth() == 0 and _text_of(win.model.to_workflow(), "TextEncode").count("a blue circle") == 2
    )


def test_promote_an_inner_field_into_the_instance_inspector(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = _window(qtbot, tmp_path, registry)
    _select(win, ["positive", "negative"])
    instance = win.subgraph_ops.make_subgraph()
    win.subgraph_ops.open_subgraph(instance)
    win.show_in_inspector("positive")
    label = next(w for w in win.inspector.widget().findChildren(QLabel) if w.text() == "text")
    menu = win.subgraph_ops.inspector_menu(label)  # what a right-click on the field's label shows
    assert menu is not None
    (action,) = [a for a in menu.actions() if a.text() == "Show on subgraph node"]
    action.trigger()
    win.subgraph_ops.leave_to(0)
    _select(win, [instance])
    assert "positive.text" in win.inspector.editors  # the field is on the instance now
    win.inspector.editors["positive.text"].changed.emit("a green star")
    wf = win.model.to_workflow()
    assert "a green star" in _text_of(wf, "TextEncode")
    assert win.scene.node_items[instance].port("positive.text", "in") is not None  # a row on the node too
    # Taken off again (right-click inside: "Remove from subgraph node"): the inner node keeps the value.
    win.subgraph_ops.open_subgraph(instance)
    win.show_in_inspector("positive")
    label = next(w for w in win.inspector.widget().findChildren(QLabel) if w.text() == "text")
    (remove,) = [a for a in win.subgraph_ops.inspector_menu(label).actions()]
    assert remove.text() == "Remove from subgraph node"
    remove.trigger()
    assert win.model.node("positive").params["text"] == "a green star"
    win.subgraph_ops.leave_to(0)
    assert [p.name for p in win.model.spec(instance).params] == []
    assert "a green star" in _text_of(win.model.to_workflow(), "TextEncode")
    # Undo: the field is back on the instance; then the edit, the way out and the promotion go.
    for _ in range(3):  # back, remove, open
        win.undo_stack.undo()
    assert [p.name for p in win.model.spec(instance).params] == ["positive.text"]
    win.undo_stack.undo()
    win.undo_stack.undo()
    assert win.model.depth() == 1
    win.undo_stack.undo()
    win.subgraph_ops.leave_to(0)
    assert [p.name for p in win.model.spec(instance).params] == []


def test_promote_from_the_canvas_row_context_menu(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = _window(qtbot, tmp_path, registry)
    _select(win, ["sampler"])
    instance = win.subgraph_ops.make_subgraph()
    win.subgraph_ops.open_subgraph(instance)
    item = win.scene.node_items["sampler"]
    steps = item.inputs["steps"]
    at = item.mapToScene(QPointF(60, steps.y()))
    assert win.subgraph_ops.param_at(at) == ("sampler", "steps")
    menu = QMenu()
    win.view.context_menu_requested.emit(menu, at)  # what a right-click there builds
    (show,) = [a for a in menu.actions() if a.text() == "Show on subgraph node"]
    show.trigger()
    assert ("sampler", "steps") in win.model.promoted()
    assert not win.subgraph_ops.promote("sampler", "steps")  # once is enough
    win.undo_stack.undo()
    assert ("sampler", "steps") not in win.model.promoted()


def test_blueprint_saved_listed_in_the_palette_and_added_to_another_graph(
    qtbot: QtBot, tmp_path: Path, registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "data"))
    win = _window(qtbot, tmp_path, registry)
    _select(win, ["positive", "negative"])
    win.subgraph_ops.make_subgraph()
    path = win.subgraph_ops.library.save_selected("Prompt pair")
    assert path == tmp_path / "data" / "blueprints" / "Prompt_pair.json"
    win.new_file()
    assert win.model.node_ids() == []
    win.palette.open_at(QPointF(100, 100))
    first = win.palette.list.item(0)
    assert first.text().startswith("Prompt pair") and "Blueprints" in first.text()
    assert first.data(BLUEPRINT_ROLE) == str(path)
    assert win.palette.list.mimeData([first]).urls() == [QUrl.fromLocalFile(str(path))]  # what a drag carries
    win.palette.search.setText("prompt pa")
    win.palette.list.setCurrentRow(0)
    win.palette.accept_current()  # Enter, a click or a double-click
    (added,) = win.model.node_ids()
    assert isinstance(win.scene.node_items[added], SubgraphNodeItem)
    assert win.model.pos(added) == (100.0, 100.0)
    assert len(expand_subgraphs(win.model.to_workflow()).nodes) == 2
    assert win.undo_stack.undoText() == "Add blueprint Prompt pair"
    win.undo_stack.undo()
    assert win.model.node_ids() == [] and not win.model.to_workflow().subgraphs
    win.undo_stack.redo()
    # Dropping the file (what a drag from the palette carries) adds another instance of the same definition.
    dropped = win.drop_files([path], QPointF(400, 100))
    assert len(dropped) == 1 and win.model.node(dropped[0]).type == win.model.node(added).type
    assert dropped[0] == "prompt_pair_2" and "sampler" not in win.model.node_ids()  # the new graph only


def test_expand_puts_the_nodes_back_and_undoes(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = _window(qtbot, tmp_path, registry)
    before = win.model.to_workflow()
    _select(win, ["positive", "negative", "sampler"])
    instance = win.subgraph_ops.make_subgraph()
    _select(win, [instance])
    added = win.subgraph_ops.expand_selected()
    assert sorted(added) == ["negative", "positive", "sampler"]
    after = win.model.to_workflow()
    assert not after.subgraphs
    assert {n: (v.type, v.params, v.inputs) for n, v in after.nodes.items()} == {
        n: (v.type, v.params, v.inputs) for n, v in before.nodes.items()
    }
    assert all(win.scene.node_items[nid].isSelected() for nid in added)
    win.undo_stack.undo()
    assert instance in win.model.node_ids()
    win.undo_stack.redo()
    assert instance not in win.model.node_ids()


@pytest.mark.parametrize("make", [prompts_subgraph_file, shared_encode_file, prompt_widget_file])
def test_comfy_subgraphs_open_as_subgraphs_and_run_the_flattened_graph(
    qtbot: QtBot, tmp_path: Path, registry, make
) -> None:  # noqa: ANN001
    path = tmp_path / "template.json"
    path.write_text(json.dumps(make()))
    flat = import_file(path, registry, keep_subgraphs=False)
    win = make_window(qtbot, tmp_path, registry)
    assert win.import_path(path, import_file)
    shown = win.model.to_workflow()
    instances = [nid for nid, item in win.scene.node_items.items() if isinstance(item, SubgraphNodeItem)]
    comfy_instances = 1 if make is prompts_subgraph_file else 2
    if make is prompt_widget_file:  # each instance shows its own prompt, as in ComfyUI
        texts = sorted(win.model.node(n).params.get("text_encode.text", "") for n in instances)
        assert texts == ["a red square", "blurry"]
        _select(win, [instances[0]])
        assert "text_encode.text" in win.inspector.editors
    assert len(instances) == comfy_instances
    assert not any(n.type == "TextEncode" for n in shown.nodes.values())  # they are inside
    assert len(shown.subgraphs) == 1  # two instances of one ComfyUI subgraph share its definition
    title = "Prompts" if make is prompts_subgraph_file else "Encode"
    assert win.scene.node_items[instances[0]].title() == title
    # The ComfyUI instance's place on the canvas.
    assert win.model.pos(instances[0]) == (350.0, 0.0)
    assert run_signatures(prepare_run(shown, registry).workflow) == run_signatures(
        prepare_run(flat, registry).workflow
    )
    win.subgraph_ops.open_subgraph(instances[0])
    assert {win.model.node(n).type for n in win.model.node_ids()} == {"TextEncode"}
    assert win.subgraph_ops.breadcrumb.text() == f"Graph > {title}"


def test_a_run_shows_the_inner_nodes_on_the_subgraph_node(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = make_window(qtbot, tmp_path, registry, for_runs=True)
    win.set_workflow(load_workflow(TEXT_DEMO, registry), None)
    _select(win, ["name", "greeting"])
    instance = win.subgraph_ops.make_subgraph("Greeting")
    assert win.run_workflow()
    deadline = time.monotonic() + 60
    while (
        win.last_result is None or win.runner.running
    ):  # processEvents + sleep: the run thread needs the GIL
        assert time.monotonic() < deadline, "the run did not finish"
        QApplication.processEvents()
        time.sleep(0.01)
    assert win.last_result.ok
    state = win.scene.run_states[instance]
    inner = [win.scene.run_states[f"{instance}/{n}"] for n in ("name", "greeting")]
    assert state.status == "done" and state.seconds == pytest.approx(sum(s.seconds for s in inner))
    assert "Ran in" in win.scene.node_items[instance].toolTip()
    assert win.output.text_by_node["show"] == "Hello from Nodeloom!"  # what the flat graph shows
    # Run again from inside: the whole graph runs (all cached), its inner nodes' states on the inner nodes.
    win.subgraph_ops.open_subgraph(instance)
    win.last_result = None
    assert win.run_workflow()
    deadline = time.monotonic() + 60
    while win.last_result is None or win.runner.running:
        assert time.monotonic() < deadline, "the run did not finish"
        QApplication.processEvents()
        time.sleep(0.01)
    assert win.last_result.ok
    assert {nid: item.state.status for nid, item in win.scene.node_items.items()} == {
        "name": "cached",
        "greeting": "cached",
    }


def test_a_problem_inside_marks_the_subgraph_node(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = make_window(qtbot, tmp_path, registry)
    win.set_workflow(load_workflow(TEXT_DEMO, registry), None)
    _select(win, ["greeting", "save"])
    instance = win.subgraph_ops.make_subgraph("Greeting")
    win.subgraph_ops.open_subgraph(instance)
    win.scene.add_node("SaveText", QPointF(0, 300))  # an output with nothing wired in
    win.subgraph_ops.leave_to(0)
    assert not win.run_workflow()
    state = win.scene.run_states[instance]
    assert state.status == "error" and state.message.startswith("save_text: text: required input")
    assert f"{instance}/save_text" in win.problem_dialog.informativeText()


def test_a_picture_saved_inside_shows_on_the_subgraph_node(qtbot: QtBot, tmp_path: Path, registry) -> None:
    from PIL import Image

    from app.gui.run_worker import TimedEvent
    from nodes.events import NodePreview

    win = _window(qtbot, tmp_path, registry)
    _select(win, ["decode", "save"])
    instance = win.subgraph_ops.make_subgraph("Decode and save")
    picture = Image.new("RGB", (16, 16), (255, 200, 0))
    # What the run sends: a sampler's last preview is not an output's picture; the inner Save's is.
    win.runner.run_event.emit(TimedEvent(0.0, NodePreview("sampler", picture, final=True)))
    assert win.scene.node_items[instance].thumbnail is None
    win.runner.run_event.emit(TimedEvent(0.0, NodePreview(f"{instance}/save", picture, final=True)))
    item = win.scene.node_items[instance]
    assert item.thumbnail is not None and item.height > item._expanded_height
