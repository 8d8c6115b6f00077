"""`app --run`: exit codes, --set, --repeat, the report, Ctrl+C, and node packs from entry points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.main import main
from nodes.png import read_embedded_workflow

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_run_writes_outputs_and_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code = main(["--run", str(TEXT_DEMO), "--out", str(tmp_path / "out"), "--report", str(report), "--quiet"])
    assert code == 0
    data = json.loads(report.read_text())
    assert data["ok"] is True and len(data["runs"]) == 1
    nodes = data["runs"][0]["nodes"]
    assert nodes["save"]["status"] == "ran"
    (written,) = nodes["save"]["outputs"]
    assert Path(written).read_text() == "Hello from Nodeloom!"
    assert "memory" in data


def test_repeat_makes_every_node_of_the_second_run_cached(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code = main(
        ["--run", str(TEXT_DEMO), "--out", str(tmp_path), "--repeat", "2", "--report", str(report), "--quiet"]
    )
    assert code == 0
    runs = json.loads(report.read_text())["runs"]
    assert len(runs) == 2
    assert {n["status"] for n in runs[0]["nodes"].values()} == {"ran"}
    assert {n["status"] for n in runs[1]["nodes"].values()} == {"cached"}
    assert len(list(tmp_path.glob("greeting_*.txt"))) == 1


def test_set_overrides_a_parameter(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code = main(
        [
            "--run",
            str(TEXT_DEMO),
            "--out",
            str(tmp_path),
            "--set",
            "name.text=the CLI",
            "--report",
            str(report),
            "--quiet",
        ]
    )
    assert code == 0
    (written,) = json.loads(report.read_text())["runs"][0]["nodes"]["save"]["outputs"]
    assert Path(written).read_text() == "Hello from the CLI!"


@pytest.mark.parametrize("bad", ["name.colour=red", "ghost.text=x", "nodot=1", "name.text"])
def test_bad_set_exits_2_and_names_the_node(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["--run", str(TEXT_DEMO), "--out", str(tmp_path), "--set", bad]) == 2
    err = capsys.readouterr().err
    assert bad.split("=")[0].split(".")[0] in err


def test_invalid_workflow_names_both_nodes_fields_and_reasons(tmp_path: Path, capsys) -> None:
    data = json.loads(TEXT_DEMO.read_text())
    data["nodes"]["name"]["type"] = "Txet"
    data["nodes"]["count"] = {"type": "Int", "params": {"value": 2**40}}
    path = _write(tmp_path / "bad.json", data)
    assert main(["--run", str(path), "--out", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich may wrap long lines
    assert "node 'name', field 'type'" in err and "unknown node type 'Txet'" in err
    assert "node 'count', field 'value'" in err and "above the maximum" in err
    assert str(path) in err


def test_a_failed_run_exits_1_and_reports_the_error(tmp_path: Path) -> None:
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "img": {"type": "LoadImage", "params": {"path": str(tmp_path / "missing.png")}},
            "save": {"type": "SaveImage", "params": {"prefix": "x"}, "inputs": {"image": ["img", "image"]}},
        },
    }
    path = _write(tmp_path / "wf.json", data)
    report = tmp_path / "r.json"
    assert main(["--run", str(path), "--out", str(tmp_path), "--report", str(report), "--quiet"]) == 1
    run = json.loads(report.read_text())["runs"][0]
    assert run["nodes"]["img"]["status"] == "error"
    assert run["nodes"]["img"]["error"]["type"] == "FileNotFoundError"
    assert "missing.png" in run["nodes"]["img"]["error"]["message"]


def test_save_image_embeds_the_workflow_and_the_png_runs_again(tmp_path: Path) -> None:
    from PIL import Image

    source = tmp_path / "in.png"
    Image.new("RGB", (8, 6), (200, 30, 40)).save(source)
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "img": {"type": "LoadImage", "params": {"path": str(source)}},
            "save": {
                "type": "SaveImage",
                "params": {"prefix": "copy"},
                "inputs": {"image": ["img", "image"]},
            },
        },
    }
    path = _write(tmp_path / "wf.json", data)
    assert main(["--run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    (png,) = (tmp_path / "a").glob("copy_*.png")
    assert Image.open(png).getpixel((3, 3)) == (200, 30, 40)
    assert read_embedded_workflow(png)["nodes"]["img"]["params"]["path"] == str(source)
    # The PNG itself is a workflow.
    assert main(["--run", str(png), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert len(list((tmp_path / "b").glob("copy_*.png"))) == 1


def _pack_env(tmp_path: Path) -> dict[str, str]:
    """Install the test node pack the way pip would: a dist-info with an entry point on the path."""
    site = tmp_path / "site"
    dist = site / "nodeloom_testpack-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nodeloom-testpack\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nodeloom.nodes]\ntestpack = nodeloom_testpack:NODES\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO / "tests/nodepack"), str(REPO)])
    return env


def _pack_workflow(tmp_path: Path, steps: int) -> Path:
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "t": {"type": "Text", "params": {"text": "hi"}},
            "slow": {
                "type": "testpack.Slow",
                "params": {"steps": steps, "delay": 0.05},
                "inputs": {"text": ["t", "text"]},
            },
            "loud": {"type": "testpack.Shout", "params": {"times": 2}, "inputs": {"text": ["slow", "text"]}},
            "save": {"type": "SaveText", "params": {"prefix": "loud"}, "inputs": {"text": ["loud", "text"]}},
        },
    }
    return _write(tmp_path / "pack.json", data)


@pytest.mark.slow
def test_node_pack_from_entry_points_runs(tmp_path: Path) -> None:
    wf = _pack_workflow(tmp_path, steps=2)
    proc = subprocess.run(
        [sys.executable, "-m", "app.main", "--run", str(wf), "--out", str(tmp_path / "o"), "--quiet"],
        env=_pack_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (out,) = (tmp_path / "o").glob("loud_*.txt")
    assert out.read_text() == "HI!HI!"
    listing = subprocess.run(
        [sys.executable, "-m", "app.main", "nodes"],
        env=_pack_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "testpack.Shout" in listing.stdout


@pytest.mark.slow
def test_ctrl_c_cancels_exits_130_and_still_writes_the_report(tmp_path: Path) -> None:
    wf = _pack_workflow(tmp_path, steps=2000)
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.main",
            "--run",
            str(wf),
            "--out",
            str(tmp_path / "o"),
            "--report",
            str(report),
        ],
        env=_pack_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    line = ""
    while "slow" not in line and time.monotonic() < deadline:  # wait until the slow node has started
        line = proc.stderr.readline()
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    run = json.loads(report.read_text())["runs"][0]
    assert run["cancelled"] is True and run["nodes"]["slow"]["status"] == "cancelled"
    assert run["nodes"]["t"]["status"] == "ran"
    assert not list((tmp_path / "o").glob("loud_*.txt"))


def test_an_unusable_device_exits_2_with_a_message(tmp_path: Path, capsys) -> None:
    assert main(["--run", str(TEXT_DEMO), "--out", str(tmp_path), "--device", "warp-drive"]) == 2
    assert "warp-drive" in capsys.readouterr().err


def test_messages_with_brackets_are_printed_intact(tmp_path: Path, capsys) -> None:
    data = json.loads(TEXT_DEMO.read_text())
    data["nodes"]["save"]["inputs"]["text"] = "greeting.text"
    path = _write(tmp_path / "bad.json", data)
    assert main(["--run", str(path), "--out", str(tmp_path)]) == 2
    assert "[node_id, output_name]" in capsys.readouterr().err


def test_set_on_a_wired_parameter_is_refused(tmp_path: Path, capsys) -> None:
    data = json.loads(TEXT_DEMO.read_text())
    data["nodes"]["save"]["inputs"]["prefix"] = ["name", "text"]
    path = _write(tmp_path / "wf.json", data)
    assert main(["--run", str(path), "--out", str(tmp_path), "--set", "save.prefix=x"]) == 2
    assert "fed by a wire from name.text" in capsys.readouterr().err


def test_a_prefix_cannot_write_outside_the_output_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a" / "b"
    report = tmp_path / "r.json"
    code = main(
        [
            "--run",
            str(TEXT_DEMO),
            "--out",
            str(out),
            "--set",
            "save.prefix=../../escaped",
            "--report",
            str(report),
            "--quiet",
        ]
    )
    # Refused at validation (exit 2), before any node runs, not when the save node is reached.
    assert code == 2
    assert not list(tmp_path.rglob("escaped*"))
    assert not report.exists()
    error = capsys.readouterr().err
    assert "'prefix'" in error and "plain file name" in error


@pytest.mark.slow
def test_the_plan_does_not_run_a_node_packs_node_without_a_model(tmp_path: Path) -> None:
    """`--offload auto` plans before the run; a pack's slow text node must run once (in the run), not twice."""
    wf = _pack_workflow(tmp_path, steps=40)  # 40 x 0.05 s = 2 s of work in the node
    proc = subprocess.run(
        [sys.executable, "-m", "app.main", "plan", str(wf), "--json"],
        env=_pack_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    nodes = {n["node_id"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert "node pack" in nodes["slow"]["note"]
    assert "loud" in nodes  # the nodes after it still plan, on a stand-in text
