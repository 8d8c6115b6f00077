"""GraphModel: the editor's Qt-free graph: ids, wiring rules, notifications, snapshots and paste."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.graph_model import Connection, GraphModel
from nodes.workflow import Link, load_workflow, save_workflow, validate


@pytest.fixture
def model(registry) -> GraphModel:
    return GraphModel(registry)


def _text_graph(model: GraphModel) -> tuple[str, str, str]:
    text = model.add_node("Text", (0, 0), {"text": "hi"})
    fmt = model.add_node("FormatText", (250, 0))
    save = model.add_node("SaveText", (500, 0))
    model.connect(text, "text", fmt, "a")
    model.connect(fmt, "text", save, "text")
    return text, fmt, save


def test_ids_are_readable_and_unique(model: GraphModel) -> None:
    assert model.add_node("FormatText", (0, 0)) == "format_text"
    assert model.add_node("FormatText", (0, 0)) == "format_text_2"
    assert model.add_node("Text", (0, 0), node_id="prompt") == "prompt"
    with pytest.raises(ValueError):
        model.add_node("Text", (0, 0), node_id="prompt")
    assert model.node("format_text").params == {"template": "{a}"}


def test_notifications_fire_for_each_change(model: GraphModel) -> None:
    seen: list[tuple] = []
    for event in (
        "node_created",
        "connection_created",
        "connection_removed",
        "param_changed",
        "node_moved",
        "node_removed",
        "group_changed",
    ):
        model.subscribe(event, lambda *args, e=event: seen.append((e, *args)))
    text, fmt, save = _text_graph(model)
    model.set_param(text, "text", "bye")
    model.move_node(text, (10, 20))
    model.remove_node(fmt)
    model.add_group("G", [0, 0, 10, 10])
    kinds = [s[0] for s in seen]
    assert kinds.count("node_created") == 3
    assert ("param_changed", text, "text", "bye") in seen
    assert ("node_moved", text, (10.0, 20.0)) in seen
    assert kinds.count("connection_removed") == 2  # both wires of the removed node go first
    assert kinds.index("connection_removed") < kinds.index("node_removed")
    assert kinds[-1] == "group_changed"


def test_connect_replaces_the_existing_input_link(model: GraphModel) -> None:
    a = model.add_node("Text", (0, 0))
    b = model.add_node("Text", (0, 100))
    fmt = model.add_node("FormatText", (250, 0))
    model.connect(a, "text", fmt, "a")
    model.connect(b, "text", fmt, "a")
    assert model.input_link(fmt, "a") == Link(b, "text")
    assert model.connections() == [Connection(b, "text", fmt, "a")]
    model.disconnect(fmt, "a")
    assert model.connections() == []


def test_connection_possible_refuses_wrong_types_and_loops(model: GraphModel) -> None:
    text, fmt, save = _text_graph(model)
    integer = model.add_node("Int", (0, 200))
    ok, reason = model.connection_possible(integer, "value", save, "text")
    assert not ok and "INT" in reason and "TEXT" in reason
    ok, reason = model.connection_possible(fmt, "text", fmt, "b")
    assert not ok and "itself" in reason
    fmt2 = model.add_node("FormatText", (0, 300))
    model.connect(fmt, "text", fmt2, "a")
    ok, reason = model.connection_possible(fmt2, "text", fmt, "b")
    assert not ok and "loop" in reason
    # Any parameter can take a wire of its type: a STRING/TEXT output may feed the template.
    assert model.connection_possible(text, "text", fmt2, "template") == (True, "")
    with pytest.raises(ValueError):
        model.connect(integer, "value", save, "text")


def test_snapshot_restore_brings_back_nodes_and_all_wires(model: GraphModel) -> None:
    text, fmt, save = _text_graph(model)
    model.add_group("Middle", [200, -50, 200, 150])
    before = model.to_workflow().to_dict()
    snap = model.snapshot([fmt], [0])
    model.remove([fmt], [0])
    assert fmt not in model.node_ids() and model.connections() == [] and model.groups() == []
    model.restore(snap)
    assert model.to_workflow().to_dict() == before


def test_restore_and_paste_keep_each_node_s_saved_version(model: GraphModel) -> None:
    text, fmt, save = _text_graph(model)
    current = model.node(fmt).version
    # As if loaded from files written by an older FormatText (0) and before versions were recorded (None).
    model.workflow.nodes[fmt].version = 0
    model.workflow.nodes[save].version = None
    snap = model.snapshot([fmt, save])
    model.remove([fmt, save])
    model.restore(snap)  # undo of the delete
    assert model.node(fmt).version == 0 and model.node(save).version is None
    pasted = model.paste(model.snapshot([fmt]))
    assert model.node(pasted[0]).version == 0  # same params, same version they were written for
    assert model.node(model.add_node("FormatText", (0, 0))).version == current  # new nodes: today's version


def test_paste_makes_fresh_ids_keeps_inner_wires_and_offsets(model: GraphModel) -> None:
    text, fmt, save = _text_graph(model)
    new = model.paste(model.snapshot([text, fmt]), offset=(30, 40))
    assert new == ["text_2", "format_text_2"]
    assert model.input_link("format_text_2", "a") == Link("text_2", "text")
    assert model.pos("text_2") == (30.0, 40.0)
    assert model.node("text_2").params["text"] == "hi"
    assert not any(c.in_node == save and c.out_node == "format_text_2" for c in model.connections())


def test_ids_and_layout_survive_save_and_load(model: GraphModel, registry, tmp_path: Path) -> None:
    _text_graph(model)
    model.move_node("save", (640, 32))
    path = tmp_path / "wf.json"
    save_workflow(model.to_workflow(), path)
    loaded = GraphModel(registry, load_workflow(path, registry))
    assert loaded.node_ids() == model.node_ids()
    assert loaded.pos("save") == (640.0, 32.0)
    assert loaded.connections() == model.connections()
    assert validate(loaded.to_workflow(), registry) == []
