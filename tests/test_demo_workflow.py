"""The embedded demo, end to end through Nodeloom's own graph: `make demo` draws what the prompt says.

The shipped shapes model is the best whole-pipeline check we have: a wrong text encoder, sampler or VAE
node gives a wrong picture. The picture is read with the same pixel statistics as the model's evaluation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from app.main import main
from nodes.png import read_embedded_workflow
from training.shapes.evaluate import measure_scene, score
from training.shapes.scenes import parse_caption

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo")
    report = out / "report.json"
    # What `make demo` runs.
    code = main(["--run", str(TXT2IMG), "--out", str(out), "--report", str(report), "--quiet"])
    assert code == 0
    return out, json.loads(report.read_text())


def test_make_demo_writes_a_picture_of_the_default_prompt(demo_run: tuple[Path, dict]) -> None:
    out, report = demo_run
    assert report["ok"]
    (png,) = report["runs"][0]["nodes"]["save"]["outputs"]
    prompt = json.loads(TXT2IMG.read_text())["nodes"]["positive"]["params"]["text"]
    asked = parse_caption(prompt)
    seen = measure_scene(Image.open(png))
    checks = score(asked, seen)
    assert checks["background"] and checks["colour"], f"asked {asked}, drew {seen}"


def test_the_png_carries_its_workflow_and_runs_again_to_the_same_picture(
    demo_run: tuple[Path, dict], tmp_path: Path
) -> None:
    out, report = demo_run
    (png,) = report["runs"][0]["nodes"]["save"]["outputs"]
    embedded = read_embedded_workflow(Path(png))
    assert embedded["nodes"]["load"]["params"]["path"] == "builtin:shapes-sd"
    assert main(["--run", png, "--out", str(tmp_path), "--quiet"]) == 0
    (again,) = tmp_path.glob("*.png")
    assert list(Image.open(again).getdata()) == list(Image.open(png).getdata())


def test_a_different_prompt_changes_the_picture_accordingly(tmp_path: Path) -> None:
    prompt = "a large blue square on a white background"
    assert (
        main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--set", f"positive.text={prompt}", "--quiet"])
        == 0
    )
    (png,) = tmp_path.glob("*.png")
    seen = measure_scene(Image.open(png))
    checks = score(parse_caption(prompt), seen)
    assert checks["background"] and checks["colour"], f"asked {prompt!r}, drew {seen}"
