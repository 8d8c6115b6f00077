"""ComfyUI's upscaler utility templates run here: the GAN video upscaler on a tiny Real-ESRGAN file under the
template's own name (`RealESRGAN_x4plus.safetensors`, read natively: no spandrel), and the model-free
interpolation upscaler. Skipped without ComfyUI's template package (`pip install comfyui-workflow-templates-json`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from app.main import main
from pipelines.diffusion.comfy_layouts.template_fixtures import (
    UPSCALER_NAME,
    save_tiny_upscaler,
    write_tiny_clip,
)
from tests.template_runs import import_template, place_pictures


def _frames(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _import_and_run(template: str, models: Path, tmp_path: Path) -> Path:
    """`app import` + `app check` of the template against `models`, then its run on the CPU; the output folder."""
    workflow = tmp_path / f"{template}.nodeloom.json"
    import_template(template, models, workflow)
    out = tmp_path / "out"
    args = [
        "--run",
        str(workflow),
        "--out",
        str(out),
        "--quiet",
        "--device",
        "cpu",
        "--models-dir",
        str(models),
    ]
    assert main(args) == 0
    return out


def test_gan_video_upscaler_template_runs_on_a_real_esrgan_file(tmp_path: Path) -> None:
    root = tmp_path / "ComfyUI"
    models = root / "models"
    save_tiny_upscaler(models / "upscale_models" / UPSCALER_NAME)
    write_tiny_clip(root / "input" / "gan_input.mp4", frames=3, size=(24, 16))
    out = _import_and_run("utility-gan_upscaler", models, tmp_path)
    (video,) = sorted(out.rglob("*.mp4"))  # --out holds only what the graph saves
    source, upscaled = _frames(root / "input" / "gan_input.mp4"), _frames(video)
    assert len(upscaled) == len(source) == 3
    assert upscaled[0].shape == (16 * 4, 24 * 4, 3)
    # Random weights give no pretty picture, but the frames differ as the input's do (the blue ramp over t).
    assert not np.array_equal(upscaled[0], upscaled[-1])


def test_interpolation_upscaler_template_runs_without_a_model(tmp_path: Path) -> None:
    root = tmp_path / "ComfyUI"
    models = root / "models"
    models.mkdir(parents=True)
    place_pictures("utility_interpolation_image_upscale", root, size=(30, 20))
    out = _import_and_run("utility_interpolation_image_upscale", models, tmp_path)
    (saved,) = sorted(out.rglob("*.png"))
    with Image.open(saved) as picture:
        assert picture.size == (60, 40)  # ImageScaleBy 2, lanczos
