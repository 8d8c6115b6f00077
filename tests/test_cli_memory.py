"""`app --run` and the memory settings: budgets parsed whatever the device, settings that do nothing on this
device are said so, and sequential offload loads each model once per run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.main import main

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"


@pytest.mark.parametrize("flag", ["--vram-budget", "--ram-budget"])
def test_a_malformed_budget_exits_2_on_cpu_and_names_the_setting(flag: str, tmp_path: Path, capsys) -> None:
    code = main(
        ["--run", str(TEXT_DEMO), "--device", "cpu", flag, "banana", "--out", str(tmp_path), "--quiet"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert flag.removeprefix("--") in err and "banana" in err and "Traceback" not in err


def test_a_vram_budget_on_cpu_is_warned_about(tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.json"
    args = ["--run", str(TEXT_DEMO), "--device", "cpu", "--vram-budget", "2GiB", "--out", str(tmp_path)]
    assert main([*args, "--report", str(report)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "vram-budget" in err and "no effect on the CPU" in err
    assert json.loads(report.read_text())["memory"]["ignored_settings"]


def test_txt2img_sequential_report_has_one_load_per_component(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "data"))  # nothing learned yet; demo built here
    report = tmp_path / "r.json"
    args = ["--run", str(TXT2IMG), "--device", "cpu", "--offload", "sequential", "--out", str(tmp_path)]
    args += [
        "--set",
        "load.path=demo:tiny-sd",
        "--set",
        "sampler.steps=2",
        "--report",
        str(report),
        "--quiet",
    ]
    assert main(args) == 0
    memory = json.loads(report.read_text())["memory"]
    loads = Counter(load["component"] for load in memory["loads"])
    assert loads == {"text_encoder": 1, "unet": 1, "vae": 1}
    assert Counter(u["component"] for u in memory["unloads"]) == loads  # and each left once
    sources = {(r["component"], r["source"]) for r in memory["reservations"]}
    # The negative prompt ran first and measured the encoder; the positive prompt reserved that figure.
    assert ("text_encoder", "formula") in sources and ("text_encoder", "learned") in sources
