"""The model under the editor's subgraphs, without Qt: a NestedGraphModel opens a definition, edits inside
reach every instance and the saved file, nested subgraphs fold back, blueprints merge their definitions, and a
ComfyUI file's instances fold into shared definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.comfy.subgraph_fold import comfy_instances
from nodes.registry import default_registry
from nodes.subgraph import expand_subgraphs, make_subgraph
from nodes.subgraph_blueprint import blueprint_document, blueprint_entries, insert_blueprint, read_blueprint
from nodes.subgraph_edit import NestedGraphModel
from nodes.workflow import Workflow, load_workflow, validate
from tests.comfy_subgraph_fixtures import (
    prompt_widget_file,
    prompts_subgraph_file,
    run_signatures,
    shared_encode_file,
)

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


@pytest.fixture(scope="module")
def reg():  # noqa: ANN201
    return default_registry(entry_point_packs=False)


def _texts(wf: Workflow) -> list[str]:
    return sorted(n.params["text"] for n in expand_subgraphs(wf).nodes.values() if n.type == "TextEncode")


def test_edits_inside_reach_every_instance_and_the_saved_workflow(reg) -> None:  # noqa: ANN001
    wf, one = make_subgraph(load_workflow(TXT2IMG, reg), ["positive"], title="Prompt")
    model = NestedGraphModel(reg, wf)
    two = model.paste(model.snapshot([one]))[0]
    assert two == "prompt_2"  # named after the subgraph, no "/" (that would read as a path into one)
    assert model.spec(two) is not None and model.spec(two).category == "subgraphs"
    model.enter(one)
    assert model.node_ids() == ["positive"] and model.depth() == 1
    model.set_param("positive", "text", "inside")
    saved = model.to_workflow()  # while still inside
    assert validate(saved, reg) == []
    assert _texts(saved).count("inside") == 2
    assert model.leave() == [one] and model.depth() == 0
    assert _texts(model.to_workflow()).count("inside") == 2


def test_a_nested_subgraph_edited_two_levels_down_folds_into_the_root(reg) -> None:  # noqa: ANN001
    wf, inner = make_subgraph(load_workflow(TXT2IMG, reg), ["positive"], title="Inner")
    wf, outer = make_subgraph(wf, [inner, "negative"], title="Outer")
    model = NestedGraphModel(reg, wf)
    model.enter(outer)
    model.enter(inner)
    assert [level.title for level in model.levels()] == ["Outer", "Inner"]
    model.set_param("positive", "text", "deep")
    assert "deep" in _texts(model.to_workflow())
    model.leave(2)
    assert "deep" in _texts(model.to_workflow()) and model.depth() == 0


def test_promote_inside_puts_the_field_on_every_instance(reg) -> None:  # noqa: ANN001
    wf, one = make_subgraph(load_workflow(TXT2IMG, reg), ["sampler"], title="S")
    model = NestedGraphModel(reg, wf)
    model.enter(one)
    model.set_parent_workflow(model.promote("sampler", "steps"))
    assert model.promoted() == {("sampler", "steps")}
    model.leave()
    spec = model.spec(one)
    assert [p.name for p in spec.params] == ["sampler.steps"]
    model.set_param(one, "sampler.steps", 3)
    assert expand_subgraphs(model.to_workflow()).nodes[f"{one}/sampler"].params["steps"] == 3


def test_blueprint_round_trip_and_a_clashing_definition_is_renamed(tmp_path: Path, reg) -> None:  # noqa: ANN001
    wf, one = make_subgraph(load_workflow(TXT2IMG, reg), ["positive", "negative"], title="Pair")
    doc = blueprint_document(wf, one, "My pair")
    path = tmp_path / "My_pair.json"
    path.write_text(json.dumps(doc))
    assert blueprint_entries(tmp_path) == [("My pair", path)]
    doc = read_blueprint(path)
    # Into the graph it came from: the retitled definition differs from the one there, so it gets its own id.
    merged, added = insert_blueprint(wf, doc, (5.0, 6.0))
    assert len(merged.subgraphs) == 2 and merged.nodes[added].type != merged.nodes[one].type
    assert validate(merged, reg) == []
    # Twice into one graph: the second shares the first's definition.
    again, second = insert_blueprint(merged, doc, (50.0, 6.0))
    assert len(again.subgraphs) == 2 and again.nodes[second].type == again.nodes[added].type
    (tmp_path / "broken.json").write_text("{")
    assert [title for title, _ in blueprint_entries(tmp_path)] == ["My pair"]  # a damaged file is not listed
    with pytest.raises(ValueError, match="broken.json"):
        read_blueprint(tmp_path / "broken.json")


def test_comfy_instances_are_found_with_their_names_and_places() -> None:
    assert [(i.path, i.title, i.pos) for i in comfy_instances(prompts_subgraph_file())] == [
        ("10", "Prompts", (350.0, 0.0))
    ]
    assert [i.path for i in comfy_instances(shared_encode_file())] == ["10", "11"]
    # The prompt is a widget on each instance: the fold shows it on ours.
    assert [i.widgets for i in comfy_instances(prompt_widget_file())] == [(("1", "text"),), (("1", "text"),)]


def test_a_copied_instance_pastes_into_another_graph_with_its_definition(reg) -> None:  # noqa: ANN001
    wf, one = make_subgraph(load_workflow(TXT2IMG, reg), ["positive", "negative"], title="Pair")
    source = NestedGraphModel(reg, wf)
    clip = json.loads(json.dumps(source.snapshot([one])))  # through the clipboard's JSON
    other = NestedGraphModel(reg, Workflow())
    (pasted,) = other.paste(clip)
    assert other.spec(pasted) is not None and other.spec(pasted).category == "subgraphs"
    assert len(expand_subgraphs(other.to_workflow()).nodes) == 2
    (again,) = other.paste(clip)  # a second paste shares the definition
    assert len(other.to_workflow().subgraphs) == 1 and other.node(again).type == other.node(pasted).type


def test_make_a_subgraph_inside_a_subgraph(reg) -> None:  # noqa: ANN001
    wf, outer = make_subgraph(load_workflow(TXT2IMG, reg), ["positive", "negative", "sampler"], title="Outer")
    model = NestedGraphModel(reg, wf)
    model.enter(outer)
    inner_wf, inner = make_subgraph(model.workflow, ["positive", "negative"], title="Inner")
    model.replace(inner_wf)
    assert model.spec(inner) is not None
    model.leave()
    root = model.to_workflow()
    assert len(root.subgraphs) == 2 and validate(root, reg) == []
    assert sorted(n.type for n in expand_subgraphs(root).nodes.values()) == sorted(
        n.type for n in load_workflow(TXT2IMG, reg).nodes.values()
    )


@pytest.mark.slow  # ~1 s a template: imports and prepares two runs each
@pytest.mark.parametrize("name", ["image_z_image_turbo", "image_qwen_image", "image_netayume_lumina_t2i"])
def test_published_templates_fold_into_subgraphs_that_run_their_flat_graph(reg, tmp_path: Path, name) -> None:  # noqa: ANN001
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from app.importing import import_file
    from benchmarks.comfy_templates import templates_folder
    from nodes.modes import prepare_run

    path = templates_folder() / f"{name}.json"
    flat = import_file(path, reg, keep_subgraphs=False)
    folded = import_file(path, reg)
    assert folded.subgraphs and len(folded.nodes) < len(flat.nodes)
    assert any(d.get("widgets") for d in folded.subgraphs.values())  # ComfyUI's instance widgets shown
    assert run_signatures(prepare_run(folded, reg).workflow) == run_signatures(
        prepare_run(flat, reg).workflow
    )
