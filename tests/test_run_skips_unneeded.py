"""`app --run` runs what the outputs need and names the rest as skipped (as ComfyUI and the editor do); a
missing input on a node an output needs stays an error (exit 2). An Empty Latent with no model wired in is
sized by the model of the sampler that consumes it."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import main
from nodes.latent_sizing import sizing_link
from nodes.modes import prepare_run
from nodes.workflow import Link, load_workflow, parse_workflow

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources" / "workflows" / "text_demo.json"
WORKFLOWS = REPO / "resources" / "workflows"


def _with_leftover(tmp_path: Path) -> Path:
    data = json.loads(TEXT_DEMO.read_text())
    data["nodes"]["text_encode_3"] = {"type": "TextEncode", "params": {"text": "left over"}, "inputs": {}}
    path = tmp_path / "leftover.json"
    path.write_text(json.dumps(data))
    return path


def test_a_leftover_node_is_skipped_and_named_in_the_report(tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.json"
    code = main(
        ["--run", str(_with_leftover(tmp_path)), "--out", str(tmp_path / "out"), "--report", str(report)]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped (no output needs it): text_encode_3 (Text Encode)" in err
    saved = json.loads(report.read_text())
    assert saved["ok"] and saved["skipped"] == ["text_encode_3"]
    assert "text_encode_3" not in saved["runs"][0]["nodes"]


def test_a_missing_input_on_a_needed_node_is_still_refused(tmp_path: Path, capsys) -> None:
    data = json.loads(TEXT_DEMO.read_text())
    data["nodes"]["save"]["inputs"] = {}  # the output's own input: the run cannot go on without it
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    assert main(["--run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "not connected" in capsys.readouterr().err


def test_the_shipped_workflows_keep_their_graph(registry) -> None:
    """They wire the VAE into their Empty Latent and feed every node to an output: nothing rewired, nothing
    skipped, so `app --run` does exactly what it did."""
    for path in sorted(WORKFLOWS.glob("*.json")):
        wf = load_workflow(path, registry)
        plan = prepare_run(wf, registry)
        assert plan.skipped == [] and plan.sized_by_sampler == [], path.name
        assert not plan.problems, path.name


def test_an_unwired_latent_takes_its_samplers_model_through_a_latent_step(registry) -> None:
    wf, _ = parse_workflow(
        {
            "format": "nodeloom.workflow",
            "version": 1,
            "nodes": {
                "load": {"type": "LoadDiffusionModel"},
                "latent": {"type": "EmptyLatent"},
                "sized": {"type": "EmptyLatent", "params": {"width": 64, "height": 64}},
                "pos": {"type": "TextEncode", "inputs": {"text_encoder": ["load", "text_encoder"]}},
                "mask": {"type": "SetLatentNoiseMask", "inputs": {"latent": ["latent", "latent"]}},
                "sampler": {
                    "type": "Sampler",
                    "inputs": {
                        "denoiser": ["load", "denoiser"],
                        "positive": ["pos", "conditioning"],
                        "latent": ["mask", "latent"],
                    },
                },
                "other": {
                    "type": "Sampler",
                    "inputs": {
                        "denoiser": ["load", "denoiser"],
                        "positive": ["pos", "conditioning"],
                        "latent": ["sized", "latent"],
                    },
                },
            },
        },
        registry,
    )  # the noise mask's own mask input is left out: only the wiring matters here
    assert sizing_link(wf, registry, "latent") == Link("load", "denoiser")
    assert sizing_link(wf, registry, "sized") is None  # a typed size is the user's
    wf.nodes["latent"].inputs["vae"] = Link("load", "vae")
    assert sizing_link(wf, registry, "latent") is None  # a wired model sizes it, as before
