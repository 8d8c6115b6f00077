"""Qwen-Image-Edit end to end: `app --run edit_qwenimage.json` on a Qwen-Image-Edit diffusers folder gives
`QwenImageEditPlusPipeline`'s picture (2509 and 2511), and TextEncodeQwenImageEdit gives
`QwenImageEditPipeline`'s (the first release).

The folders are the tiny `demo:tiny-qwenimage-edit` / `-2511` fixtures (random weights, fixed seeds), saved
and loaded by path as a user's folder would be. Theirs is the pipeline with the folder's components and a
real `Qwen2VLProcessor` built without a video processor (torchvision is not installed; see
`pipelines.diffusion.demo_qwenimage_edit`). The pipelines resize every picture to about 1024 x 1024 px (and
384 x 384 px for the VL model in Plus); the tiny models run at small areas instead, on both sides: ours
through the nodes' `vae_pixels` / `vl_pixels`, theirs by setting the pipeline module's area constants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from app.main import main
from pipelines.diffusion.demo_models import save_demo_model

REPO = Path(__file__).resolve().parent.parent
EDIT = REPO / "resources/workflows/edit_qwenimage.json"
PROMPT = "make the circle a yellow triangle"
NEGATIVE = "blurry bad quality"
# Odd patch counts on purpose: 40 / (4 px per latent x 2x2 packing) = 5 patches across.
WIDTH, HEIGHT = 40, 56
VAE_AREA = 64 * 96  # the pictures' VAE size: 64x96 for a 2:3 picture (multiples of 32)
VL_AREA = 56 * 84  # what the VL model sees in Plus: 56x84 -> 4x6 merged tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_demo_model("tiny-qwenimage-edit", tmp_path_factory.mktemp("qedit") / "tiny-qwenimage-edit")


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (60, 90)) -> Path:
    """A smooth random picture (w x h): not a multiple of anything, so every resize does something."""
    w, h = size
    rng = np.random.RandomState(seed)
    ramp = np.linspace(0, 1, w * h * 3).reshape(h, w, 3)
    array = (255 * (0.6 * ramp + 0.4 * rng.rand(h, w, 3))).astype(np.uint8)
    Image.fromarray(array).save(path)
    return path


def ours(
    folder: Path, out: Path, image: Path, *, cfg: float = 4.0, steps: int = 3, extra: tuple = ()
) -> np.ndarray:
    sets: dict[str, Any] = {
        "load.path": str(folder),
        "image.path": str(image),
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "positive.prompt": PROMPT,
        "negative.prompt": NEGATIVE,
    }
    for side in ("positive", "negative"):
        sets |= {f"{side}.vae_pixels": VAE_AREA, f"{side}.vl_pixels": VL_AREA}
    args = ["--run", str(EDIT), "--out", str(out), "--quiet", "--device", "cpu", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 0
    (png,) = sorted(out.glob("*.png"))
    return np.asarray(Image.open(png).convert("RGB"))


def reference_processor(folder: Path) -> Any:
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.demo_qwenimage_edit import qwen2vl_processor

    processor = folder / "processor"
    return qwen2vl_processor(
        Qwen2VLImageProcessorPil.from_pretrained(str(processor)),
        AutoTokenizer.from_pretrained(str(processor)),
    )


def theirs_plus(
    folder: Path, images: list[Path], monkeypatch: pytest.MonkeyPatch, *, cfg: float = 4.0, steps: int = 3
) -> np.ndarray:
    from diffusers import QwenImageEditPlusPipeline
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus

    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", VAE_AREA)
    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "CONDITION_IMAGE_SIZE", VL_AREA)
    pipe = QwenImageEditPlusPipeline.from_pretrained(
        str(folder), processor=reference_processor(folder), dtype=torch.float32
    )
    pipe.set_progress_bar_config(disable=True)
    out = pipe(
        image=[Image.open(p).convert("RGB") for p in images],
        prompt=PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    return np.asarray(out.convert("RGB"))


@pytest.mark.slow  # loads the tiny model three times (~10 s)
def test_cli_edit_matches_the_plus_pipeline(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = picture(tmp_path / "in.png")
    a = ours(folder, tmp_path / "out", image)
    b = theirs_plus(folder, [image], monkeypatch)
    assert a.shape == b.shape == (HEIGHT, WIDTH, 3)
    assert b.std() > 5  # a real picture, not a flat one both sides could agree on by accident
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"qwenimage edit plus parity: max uint8 difference {diff}")
    assert diff <= 1
    # The picture mattered: another input picture gives another output.
    other = ours(folder, tmp_path / "other", picture(tmp_path / "b.png", seed=5, size=(90, 60)))
    assert not np.array_equal(a, other)
