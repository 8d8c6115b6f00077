"""MiniMax H3 reference to video with pictures: the CLI's MiniMax H3 Reference to Video gives the frames of
diffusers' `MiniMaxH3Blocks` ref2va workflow (`references=[MiniMaxH3ImageReference, ...]`, run against the
folder's `transformer_ref`).

The folder is the tiny `demo:tiny-minimax` fixture (its `transformer_ref` seeded apart from `transformer`).
Our side is `img2video_minimax.json` with the latent node swapped for MiniMax H3 Reference to Video and two
Load Image nodes wired to ref_image_1 / ref_image_2; theirs is the modular pipeline (tests/minimax_reference.py).
The two pictures (32x48 and 64x32) are at sizes both sides leave alone: ours sizes as ComfyUI does ('max':
scaled down only, to a 2048 short edge, sides rounded to the canvas multiple 16), diffusers' setup step brings
every picture to exactly `reference_image_short_edge` (2048 for the release, upscaling), set here to the
pictures' 32. Their resize rules are checked on their own in tests/test_minimax_refs_sizing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipelines.diffusion.demo_models import save_demo_model
from tests.family_support import frames_in, run_workflow
from tests.minimax_reference import reference_pipeline

pytestmark = pytest.mark.slow  # every case builds or runs a model

REPO = Path(__file__).resolve().parent.parent
IMG2VIDEO = REPO / "resources/workflows/img2video_minimax.json"
PROMPT = "<Picture 1> a cat walking <Picture 2> a dog"
WIDTH, HEIGHT, FRAMES, STEPS = 48, 32, 124, 2  # as tests/test_family_minimax_i2v.py
SIZES = ((32, 48), (64, 32))  # (width, height), short edges 32: multiples of the canvas' 16


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-minimax", tmp_path_factory.mktemp("minimax") / "tiny-minimax")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(1)
    out = []
    for i, (w, h) in enumerate(SIZES):
        out.append(root / f"ref{i}.png")
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(out[-1])
    return out


def _workflow(tmp_path: Path, pictures: list[Path], scheduler: str = "default") -> Path:
    data = json.loads(IMG2VIDEO.read_text(encoding="utf-8"))
    nodes = data["nodes"]
    del nodes["image"]
    latent = nodes["latent"]
    latent["type"] = "MiniMaxH3ReferenceToVideo"
    latent["params"]["ref_image_size"] = "max"
    del latent["inputs"]["first_frame"]
    for i, path in enumerate(pictures, start=1):
        nodes[f"ref{i}"] = {"type": "LoadImage", "params": {"path": str(path)}, "inputs": {}}
        latent["inputs"][f"ref_image_{i}"] = [f"ref{i}", "image"]
    nodes["sampler"]["params"]["scheduler"] = scheduler
    path = tmp_path / "ref2video.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _sets(folder: Path) -> dict[str, object]:
    return {
        "load.path": str(folder),
        "sampler.steps": STEPS,
        "sampler.seed": 42,
        "latent.text": PROMPT,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "save.format": "png",
    }


def _reference_frames(folder: Path, pictures: list[Path]) -> np.ndarray:
    import torch
    from diffusers import MiniMaxH3Transformer3DModel
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3ImageReference

    pipe = reference_pipeline(folder)
    pipe.update_components(
        transformer_ref=MiniMaxH3Transformer3DModel.from_pretrained(str(folder / "transformer_ref"))
    )
    pipe.register_to_config(reference_image_short_edge=min(SIZES[0]))
    references = [MiniMaxH3ImageReference(image=Image.open(p).convert("RGB")) for p in pictures]
    state = pipe(
        references=references,
        prompt=PROMPT,
        num_inference_steps=STEPS + 1,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    )
    return (np.asarray(state.get("videos"))[0] * 255).round().astype(np.uint8)


def test_cli_frames_match_the_ref2va_pipeline(folder: Path, pictures: list[Path], tmp_path: Path) -> None:
    assert run_workflow(_workflow(tmp_path, pictures), tmp_path / "out", _sets(folder)) == 0
    expected = _reference_frames(folder, pictures)
    ours = frames_in(tmp_path / "out")
    assert ours.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    assert expected.std() > 5 and not np.array_equal(expected[0], expected[-1])
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 for a rounding edge.
    diff = np.abs(ours.astype(int) - expected.astype(int)).max()
    print(f"minimax ref2va pictures parity: max uint8 difference {diff}")
    assert diff <= 1


def test_the_reference_partition_and_the_pictures_reach_the_video(
    folder: Path, pictures: list[Path], tmp_path: Path
) -> None:
    """Another picture order gives other frames (the order labels them and lays out the clock), and so does
    the folder's fl2va `transformer` in place of `transformer_ref` (the partition is the one that runs)."""
    import shutil

    assert run_workflow(_workflow(tmp_path, pictures), tmp_path / "a", _sets(folder)) == 0
    assert run_workflow(_workflow(tmp_path, pictures[::-1]), tmp_path / "b", _sets(folder)) == 0
    swapped = tmp_path / "swapped"
    shutil.copytree(folder, swapped)
    shutil.rmtree(swapped / "transformer_ref")
    shutil.copytree(folder / "transformer", swapped / "transformer_ref")
    assert run_workflow(_workflow(tmp_path, pictures), tmp_path / "c", _sets(swapped)) == 0
    a, b, c = (frames_in(tmp_path / x) for x in "abc")
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
