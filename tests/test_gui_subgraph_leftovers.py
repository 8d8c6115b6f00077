"""Issue 29, subgraph leftovers: a problem inside a subgraph definition is reported naming the subgraph and its
inner node (`app check` too), the memory plan's bar of an inner node shows on its subgraph node, and a seed
inside a subgraph with "increment" steps after a Run (its definition's value)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.main import main
from nodes.plan import MemoryPlan, NodePlan
from nodes.registry import NodeRegistry
from nodes.subgraph import make_subgraph
from nodes.workflow import Workflow, load_workflow
from tests.gui_support import make_window

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
GIB = 1024**3

pytestmark = pytest.mark.slow  # each builds a main window or validates a graph with its model sizes (~1 s)


def _prompts_unwired(registry: NodeRegistry) -> Workflow:
    """txt2img with its prompts and latent in a subgraph "Prompts" whose positive prompt lost its text encoder
    (the definition's input no longer feeds it)."""
    wf, _ = make_subgraph(load_workflow(TXT2IMG, registry), ["positive", "negative", "latent"], "Prompts")
    for entry in wf.subgraphs["subgraph/prompts"]["inputs"]:
        entry["targets"] = [t for t in entry["targets"] if t != ["positive", "text_encoder"]]
    return wf


def test_app_check_reports_an_unwired_input_inside_a_subgraph(tmp_path: Path, registry, capsys) -> None:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(_prompts_unwired(registry).to_dict()))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "node 'prompts/positive', field 'text_encoder': required input 'text_encoder'" in err
    assert "(node 'positive' inside subgraph 'Prompts')" in err


def test_a_run_names_the_subgraph_and_marks_its_node(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = make_window(qtbot, tmp_path, registry)
    win.set_workflow(_prompts_unwired(registry), None)
    assert not win.run_workflow()
    text = win.problem_dialog.informativeText()
    assert "prompts/positive.text_encoder: required input" in text and "inside subgraph 'Prompts'" in text
    state = win.scene.run_states["prompts"]
    assert state.status == "error" and "text_encoder: required input" in state.message


def test_the_plan_bar_of_an_inner_node_shows_on_its_subgraph_node(
    qtbot: QtBot, tmp_path: Path, registry
) -> None:
    win = make_window(qtbot, tmp_path, registry)
    wf, instance = make_subgraph(load_workflow(TXT2IMG, registry), ["sampler", "decode"], "Sample")
    win.set_workflow(wf, None)
    peaks = {
        "load": GIB // 4,
        f"{instance}/sampler": 3 * GIB,
        f"{instance}/decode": 2 * GIB,
        "save": GIB // 8,
    }
    nodes = [NodePlan(nid, "X", {}, [], peak, GIB, [], [], []) for nid, peak in peaks.items()]
    plan = MemoryPlan(
        wf.source, "cpu", "none", "none", 8 * GIB, True, None, GIB, {"host": 0, "device": 3 * GIB}, nodes
    )
    win.plan_ui._show(plan)
    items = win.scene.node_items
    assert items[instance].plan == (3 * GIB, 8 * GIB)  # the highest of its inner nodes
    assert items["load"].plan == (GIB // 4, 8 * GIB)
    assert "3.00 GiB" in items[instance].toolTip() or "3.0 GiB" in items[instance].toolTip()


def test_an_inner_seed_set_to_increment_steps_after_run(qtbot: QtBot, tmp_path: Path, registry) -> None:
    win = make_window(qtbot, tmp_path, registry)
    wf, instance = make_subgraph(load_workflow(TXT2IMG, registry), ["sampler"], "Sample")
    win.set_workflow(wf, None)
    win.subgraph_ops.open_subgraph(instance)
    win.set_seed_control("sampler", "seed", "increment")  # chosen in the inspector while editing inside
    win.subgraph_ops.leave_to(0)
    # Torch "still loading" (a warm-up that never finishes): Run queues the graph and applies the seed modes
    # now, and nothing runs (a run would only slow the test down).
    from app.gui.startup import Warmup

    win.warmup.memory_ready.disconnect()  # the window's own warm-up would start the queued run when done
    win.warmup = Warmup(win)
    win.warmup.start = lambda: None  # type: ignore[method-assign]
    assert win.run_workflow()
    inner = win.model.to_workflow().subgraphs[win.model.node(instance).type]["nodes"]["sampler"]
    assert inner["params"]["seed"] == 43  # txt2img's 42, stepped once
    assert win.queue.jobs[0].workflow.nodes[f"{instance}/sampler"].params["seed"] == 42  # the run keeps 42
    # Run from inside the open subgraph: the sampler on the canvas steps.
    win.subgraph_ops.open_subgraph(instance)
    assert win.run_workflow()
    assert win.model.node("sampler").params["seed"] == 44


def _loader_subgraph_file() -> dict:
    """A ComfyUI UI file whose Load Checkpoint sits inside a subgraph "Loader" (outputs MODEL, CLIP, VAE), its
    file missing; the prompts, sampler, decode and save outside."""
    from tests.comfy_subgraph_fixtures import _encode, _link, _outer

    sub_id = "5d1e8a3c-0000-4aaa-9bbb-0000000000f1"
    kinds = ("MODEL", "CLIP", "VAE")
    sub = {
        "id": sub_id,
        "name": "Loader",
        "inputs": [],
        "outputs": [
            {"id": f"out-{i}", "name": k, "type": k, "linkIds": [201 + i]} for i, k in enumerate(kinds)
        ],
        "nodes": [
            {
                "id": 1,
                "type": "CheckpointLoaderSimple",
                "pos": [100, 100],
                "inputs": [],
                "outputs": [{"name": k, "type": k, "links": [201 + i]} for i, k in enumerate(kinds)],
                "widgets_values": ["not-here.safetensors"],
            }
        ],
        "links": [_link(201 + i, 1, i, -20, i, k) for i, k in enumerate(kinds)],
    }
    encodes = [_encode(6, "a red square", 3, 4, [350, 0]), _encode(7, "blurry", 6, 5, [350, 200])]
    links = [
        [3, 4, 1, 6, 0, "CLIP"],
        [6, 4, 1, 7, 0, "CLIP"],
        [4, 6, 0, 3, 1, "CONDITIONING"],
        [5, 7, 0, 3, 2, "CONDITIONING"],
    ]
    data = _outer(encodes, links, [sub])
    loader = data["nodes"][0]
    data["nodes"][0] = {
        **loader,
        "type": sub_id,
        "widgets_values": [],
    }  # the instance, same outputs and wires
    return data


def test_a_missing_model_inside_a_subgraph_marks_its_node_after_import(
    qtbot: QtBot, tmp_path: Path, registry
) -> None:
    from app.importing import import_file
    from pipelines.models_library import ModelsLibrary

    models = tmp_path / "models"
    models.mkdir()
    source = tmp_path / "loader_inside.json"
    source.write_text(json.dumps(_loader_subgraph_file()))
    win = make_window(qtbot, tmp_path, registry)
    win.library = ModelsLibrary([models])
    assert win.import_path(source, import_file)
    instances = [
        nid for nid in win.model.node_ids() if win.model.node(nid).type in win.model.workflow.subgraphs
    ]
    assert len(instances) == 1  # the loader stayed in its subgraph
    item = win.scene.node_items[instances[0]]
    assert item.badge()[0] == "✕ error" and "not-here.safetensors" in item.toolTip()
    assert "not-here.safetensors" in win.import_marks.banner.body.text()  # the summary names it too
