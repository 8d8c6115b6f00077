"""Krea 2 end to end: `app --run txt2img.json` on a Krea 2 diffusers folder gives `Krea2Pipeline`'s picture,
for the base model (guidance, a resolution-dependent shift) and Turbo (`is_distilled`: a fixed shift).

The folders are the tiny `demo:tiny-krea2` / `-turbo` fixtures (random weights, fixed seeds; Qwen-Image's
tiny tokenizer, whose system turn splits into the 34 tokens the pipeline drops), saved and loaded by path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.demo_models import save_demo_model

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 40, 56  # 5 x 7 patches (4 px per latent x 2x2 packing): nothing square or even assumed


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-krea2", tmp_path_factory.mktemp("krea2") / "tiny-krea2")


@pytest.fixture(scope="module")
def turbo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-krea2-turbo", tmp_path_factory.mktemp("krea2t") / "tiny-krea2-turbo")


def ours(
    folder: Path, out: Path, *, cfg: float, steps: int = 3, seed: int = 42, extra: tuple = ()
) -> np.ndarray:
    sets = {
        "load.path": str(folder),
        "sampler.scheduler": "default",
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "sampler.seed": seed,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "positive.text": PROMPT,
        "negative.text": NEGATIVE,
    }
    args = ["--run", str(TXT2IMG), "--out", str(out), "--quiet", "--device", "cpu", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 0
    (png,) = sorted(out.glob("*.png"))
    return np.asarray(Image.open(png).convert("RGB"))


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    from diffusers import Krea2Pipeline

    pipe = Krea2Pipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        guidance_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image.convert("RGB"))


@pytest.mark.slow  # loads the tiny model twice
@pytest.mark.parametrize(("which", "cfg"), [("base", 3.0), ("turbo", 0.0)])
def test_cli_picture_matches_krea2_pipeline(
    which: str, cfg: float, folder: Path, turbo: Path, tmp_path: Path
) -> None:
    path = folder if which == "base" else turbo
    a = ours(path, tmp_path, cfg=cfg)
    b = theirs(path, cfg=cfg)
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real picture, not a flat one both sides could agree on by accident
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"krea2 {which} parity cfg {cfg}: max uint8 difference {diff}")
    assert diff <= 1
