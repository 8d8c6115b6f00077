"""MiniMax H3 image to video: `app --run img2video_minimax.json` gives `MiniMaxH3ModularPipeline`'s fl2va
frames for a first frame, a last frame, or both.

The folder is the tiny `demo:tiny-minimax` fixture, loaded by path. Our side is the CLI (LoadImage, MiniMax H3
Image to Video, the Sampler, VAE Decode Video, Save Video); theirs is the modular pipeline
(tests/minimax_reference.py) called with `image` / `last_image` as PIL pictures read from the same files.
The pictures have other aspect ratios than the 48x32 canvas, so the stretch (first) and the cover crop
(last, when it follows a first) are both exercised, and the keyframes reach the text encoder as vision
tokens through the folder's own image processor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipelines.diffusion.demo_models import save_demo_model
from tests.family_support import frames_in, run_workflow
from tests.minimax_reference import reference_video

pytestmark = pytest.mark.slow  # every case builds or runs a model

REPO = Path(__file__).resolve().parent.parent
IMG2VIDEO = REPO / "resources/workflows/img2video_minimax.json"
PROMPT = "a small yellow square moving on a black background"
WIDTH, HEIGHT, FRAMES, STEPS = 48, 32, 124, 2  # as tests/test_family_minimax.py (steps + 1 grid points there)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-minimax", tmp_path_factory.mktemp("minimax") / "tiny-minimax")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two seeded noise pictures: 40x24 (wider than the canvas) and 30x36 (taller)."""
    root = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(0)
    out = {}
    for name, (w, h) in (("first", (40, 24)), ("last", (30, 36))):
        out[name] = root / f"{name}.png"
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(out[name])
    return out


def _rgb(path: Path) -> Image.Image:
    return Image.open(path).convert("RGB")


def _workflow(tmp_path: Path, pictures: dict[str, Path], given: tuple[str, ...]) -> Path:
    """img2video_minimax.json with one LoadImage per given keyframe, wired to `first_frame` / `last_frame`."""
    data = json.loads(IMG2VIDEO.read_text(encoding="utf-8"))
    del data["nodes"]["image"], data["nodes"]["latent"]["inputs"]["first_frame"]
    for anchor in given:
        data["nodes"][f"image_{anchor}"] = {
            "type": "LoadImage",
            "params": {"path": str(pictures[anchor])},
            "inputs": {},
        }
        data["nodes"]["latent"]["inputs"][f"{anchor}_frame"] = [f"image_{anchor}", "image"]
    path = tmp_path / "img2video.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("given", [("first",), ("last",), ("first", "last")], ids=["first", "last", "both"])
def test_cli_frames_match_the_fl2va_pipeline(folder: Path, pictures, tmp_path: Path, given) -> None:
    sets = {
        "load.path": str(folder),
        "sampler.steps": STEPS,
        "sampler.seed": 42,
        "latent.text": PROMPT,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "save.format": "png",
    }
    assert run_workflow(_workflow(tmp_path, pictures, given), tmp_path / "out", sets) == 0
    inputs = {("image" if g == "first" else "last_image"): _rgb(pictures[g]) for g in given}
    expected, _, _ = reference_video(
        folder,
        prompt=PROMPT,
        num_inference_steps=STEPS + 1,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        **inputs,
    )
    ours = frames_in(tmp_path / "out")
    assert ours.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert expected.std() > 5 and not np.array_equal(expected[0], expected[-1])
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 for a rounding edge.
    diff = np.abs(ours.astype(int) - expected.astype(int)).max()
    print(f"minimax fl2va {given} parity: max uint8 difference {diff}")
    assert diff <= 1


def test_a_picture_changes_the_video(folder: Path, pictures, tmp_path: Path) -> None:
    """The keyframe reaches the video: another picture gives other frames (same seed)."""
    base = {"load.path": str(folder), "sampler.steps": STEPS, "latent.text": PROMPT, "save.format": "png"}
    assert run_workflow(IMG2VIDEO, tmp_path / "a", {**base, "image.path": str(pictures["first"])}) == 0
    assert run_workflow(IMG2VIDEO, tmp_path / "b", {**base, "image.path": str(pictures["last"])}) == 0
    assert not np.array_equal(frames_in(tmp_path / "a"), frames_in(tmp_path / "b"))
