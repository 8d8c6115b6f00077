"""Reroute nodes without the editor: their output has the type of what feeds them, a headless run passes
the value through (the graph that runs is the one without them), ComfyUI export joins their wires
(and a node collapsed in ComfyUI opens collapsed)."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import main
from nodes.comfy.export import export_api
from nodes.graph_model import GraphModel
from nodes.modes import apply_node_modes
from nodes.reroute import link_type
from nodes.workflow import Link, load_workflow, parse_workflow, validate, workflow_from_dict

REPO = Path(__file__).resolve().parent.parent


def _text_demo_with_reroutes(registry) -> dict:
    """text_demo.json with two reroutes in a row on the wire greeting -> save."""
    data = json.loads((REPO / "resources/workflows/text_demo.json").read_text())
    data["nodes"]["r1"] = {"type": "Reroute", "inputs": {"input": ["greeting", "text"]}}
    data["nodes"]["r2"] = {"type": "Reroute", "inputs": {"input": ["r1", "output"]}}
    data["nodes"]["save"]["inputs"]["text"] = ["r2", "output"]
    data["ui"]["nodes"]["r1"] = {"pos": [420, -40]}
    data["ui"]["nodes"]["r2"] = {"pos": [480, -60]}
    return data


def test_a_reroute_carries_the_type_of_what_feeds_it(registry) -> None:
    wf = workflow_from_dict(_text_demo_with_reroutes(registry), registry)
    assert link_type(wf, registry, "r2", "output").name == "TEXT"
    model = GraphModel(registry, wf)
    model.add_node("Int", (0, 300), node_id="number")
    model.add_node("Sampler", (0, 600), node_id="sampler")
    # A TEXT reroute may not feed a LATENT input, with the reason a user reads in the status bar.
    ok, reason = model.connection_possible("r2", "output", "sampler", "latent")
    assert not ok and "r2.output gives TEXT" in reason and "takes LATENT" in reason
    # Nor may an INT be fed into a reroute whose output goes into a TEXT input.
    ok, reason = model.connection_possible("number", "value", "r1", "input")
    assert not ok and "passes it on to save.text, which takes TEXT" in reason
    # A reroute with nothing wired in can be wired anywhere; once fed, it carries that type.
    model.add_node("Reroute", (0, 900), node_id="loose")
    assert model.connection_possible("loose", "output", "sampler", "latent")[0]
    model.connect("number", "value", "loose", "input")
    assert model.output_type("loose", "output").name == "INT"
    assert not model.connection_possible("loose", "output", "sampler", "latent")[0]


def test_validation_sees_through_reroutes(registry) -> None:
    data = _text_demo_with_reroutes(registry)
    data["nodes"]["number"] = {"type": "Int", "params": {"value": 3}}
    data["nodes"]["r1"]["inputs"]["input"] = ["number", "value"]  # an INT reaches SaveText.text
    _, problems = parse_workflow(data, registry, source="x.json")
    assert [(p.node, p.reason) for p in problems] == [
        ("save", "type mismatch: r2.output gives INT, this input takes TEXT")
    ]
    data["nodes"]["r1"]["inputs"] = {}  # an unfed reroute is named as the problem, not the node after it
    wf, _ = parse_workflow(data, registry)
    problems = validate(apply_node_modes(wf, registry), registry)
    assert [(p.node, p.field) for p in problems] == [("r1", "input")]


def test_headless_run_passes_the_value_through_reroutes(registry, tmp_path: Path) -> None:
    path = tmp_path / "rerouted.json"
    path.write_text(json.dumps(_text_demo_with_reroutes(registry)))
    assert main(["--run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert [p.read_text() for p in (tmp_path / "out").glob("greeting*.txt")] == ["Hello from Nodeloom!"]
    # The graph that runs is the one without the reroutes: same nodes, same wires as the plain demo.
    ran = apply_node_modes(workflow_from_dict(_text_demo_with_reroutes(registry), registry), registry)
    plain = load_workflow(REPO / "resources/workflows/text_demo.json", registry)
    assert {k: n.to_json() for k, n in ran.nodes.items()} == {k: n.to_json() for k, n in plain.nodes.items()}


def test_comfy_export_joins_the_wires_of_reroutes(registry) -> None:
    wf = load_workflow(REPO / "resources/workflows/txt2img.json", registry)
    plain = export_api(wf, registry)
    model = GraphModel(registry, wf)
    link = model.input_link("decode", "vae")
    model.add_node("Reroute", (0, 0), node_id="dot")
    model.set_inputs({("dot", "input"): link})
    model.set_inputs({("decode", "vae"): Link("dot", "output")})
    prompt = export_api(model.to_workflow(), registry)
    assert "Reroute" not in {n["class_type"] for n in prompt.values()}
    assert prompt == plain  # the same ComfyUI prompt as without the dot


def test_a_collapsed_comfy_node_opens_collapsed(registry, tmp_path: Path) -> None:
    from nodes.comfy.sources import import_comfy

    data = json.loads((REPO / "tests/data/comfy/ui_features.json").read_text())
    loader = next(n for n in data["nodes"] if n["id"] == 1)
    loader["flags"] = {"collapsed": True}
    path = tmp_path / "collapsed_comfy.json"
    path.write_text(json.dumps(data))
    ui = import_comfy(path, registry).workflow["ui"]["nodes"]
    assert ui["load_checkpoint"]["collapsed"] is True
    assert not any(entry.get("collapsed") for nid, entry in ui.items() if nid != "load_checkpoint")
