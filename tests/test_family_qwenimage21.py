"""Qwen-Image 2.1 text to image end to end: `app --run txt2img.json` on a Qwen-Image 2.1 diffusers folder gives
`QwenImage21Pipeline`'s picture, for the base model (true CFG, sigmas 1 -> 1/steps) and Turbo (the folder's
`sample_sigmas`, no guidance); `stream` equals `none`; detection. Editing is tests/test_family_qwenimage21_edit.py.

The folders are the tiny `demo:tiny-qwenimage21` / `-turbo` fixtures (random weights, fixed seeds), saved and
loaded by path. Theirs is the pipeline with the folder's components and a real `Qwen3VLProcessor` built
without a video processor (torchvision is not installed; `pipelines.diffusion.demo_qwenimage21`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tests.family_support import (
    REPO,
    TXT2IMG,
    Txt2Img,
    assert_same_picture,
    demo_folder,
    run_workflow,
    txt2img_sets,
)

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 64, 96  # 2 x 3 image slots (16 px per latent, 2x2 latents a slot): nothing square


qwen21_folder = demo_folder("tiny-qwenimage21", scope="session")
qwen21_turbo = demo_folder("tiny-qwenimage21-turbo", scope="session")


def rgba_picture(out: Path) -> np.ndarray:
    """The one file a run left in `out` (a PNG and nothing else), as uint8 RGBA (the VAE decodes four channels)."""
    (png,) = list(out.iterdir())
    assert png.suffix == ".png"
    return np.asarray(Image.open(png))


ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT, read=rgba_picture)


def reference_pipeline(folder: Path) -> Any:
    from diffusers import QwenImage21Pipeline
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.demo_qwenimage21 import qwen3vl_processor

    processor = qwen3vl_processor(
        Qwen2VLImageProcessorPil.from_pretrained(str(folder / "processor")),
        AutoTokenizer.from_pretrained(str(folder / "processor")),
    )
    pipe = QwenImage21Pipeline.from_pretrained(str(folder), processor=processor, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def theirs(folder: Path, *, cfg: float, steps: int = 3, seed: int = 42) -> np.ndarray:
    image = reference_pipeline(folder)(
        PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=cfg,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    return np.asarray(image)


@pytest.mark.slow  # loads the tiny model twice
@pytest.mark.parametrize(("which", "cfg"), [("base", 3.0), ("turbo", 1.0)])
def test_cli_picture_matches_qwenimage21_pipeline(
    which: str, cfg: float, qwen21_folder: Path, qwen21_turbo: Path, tmp_path: Path
) -> None:
    folder = qwen21_folder if which == "base" else qwen21_turbo
    a, b = ours(folder, tmp_path, cfg=cfg), theirs(folder, cfg=cfg)
    # RGBA, as the pipeline's PIL picture
    assert_same_picture(a, b, (HEIGHT, WIDTH, 4), f"qwenimage21 {which} parity cfg {cfg}")


@pytest.mark.slow  # two runs of the tiny model
def test_turbo_follows_the_shipped_sigmas_not_the_steps(qwen21_turbo: Path, tmp_path: Path) -> None:
    """Turbo's `sample_sigmas` set the schedule (the pipeline ignores `num_inference_steps` then): another
    step count gives the same picture under `default`, and `euler` (sigmas 1 -> 1/steps) another one."""
    three = ours(qwen21_turbo, tmp_path / "a", cfg=1.0, steps=3)
    assert np.array_equal(three, ours(qwen21_turbo, tmp_path / "b", cfg=1.0, steps=5))
    sets = txt2img_sets(
        qwen21_turbo, cfg=1.0, steps=3, seed=42, width=WIDTH, height=HEIGHT, prompt=PROMPT, negative=NEGATIVE
    )
    assert run_workflow(TXT2IMG, tmp_path / "c", {**sets, "sampler.scheduler": "euler"}) == 0
    assert not np.array_equal(three, rgba_picture(tmp_path / "c"))


@pytest.mark.slow  # two runs of the tiny model
def test_stream_offload_gives_the_same_picture(qwen21_folder: Path, tmp_path: Path) -> None:
    ours.assert_stream_is_none(qwen21_folder, tmp_path, cfg=3.0)


@pytest.mark.slow  # three runs of the tiny model
def test_guidance_and_seed_change_the_picture(qwen21_folder: Path, tmp_path: Path) -> None:
    ours.assert_guidance_and_seed_matter(qwen21_folder, tmp_path, cfg=3.0, off=1.0)


@pytest.mark.slow  # builds the tiny model
def test_folder_and_header_are_detected_as_qwenimage21(qwen21_folder: Path) -> None:
    from pipelines.diffusion.family_detect import detect_family, family_from_file_name

    assert detect_family(qwen21_folder) == "qwenimage21"
    assert (
        detect_family(qwen21_folder / "transformer" / "diffusion_pytorch_model.safetensors") == "qwenimage21"
    )
    # ComfyUI's released file names say 2.1; Qwen-Image's own stay Qwen-Image.
    assert family_from_file_name("qwen_image_2.1_int8_convrot.safetensors") == "qwenimage21"
    assert family_from_file_name("qwen_image_2.1_turbo_bf16.safetensors") == "qwenimage21"
    assert family_from_file_name("qwen_image_bf16.safetensors") == "qwenimage"


@pytest.mark.slow  # loads a model
def test_image_to_image_is_refused(
    qwen21_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = {"load.path": str(qwen21_folder), "sampler.scheduler": "default", "sampler.denoise": 0.5}
    assert run_workflow(REPO / "resources/workflows/img2img.json", tmp_path, sets) == 1  # one clear line
    err = capsys.readouterr().err
    assert "image-to-image" in err and "Traceback" not in err


@pytest.mark.slow  # loads the tiny model twice
def test_a_sigmas_wire_is_stepped_through_as_given(qwen21_folder: Path, tmp_path: Path) -> None:
    """ComfyUI's ManualSigmas (our node of that name on the Sampler's `sigmas`) runs its list unshifted: the
    pipeline's picture with the same list on a scheduler without its resolution shift."""
    import json

    from diffusers import FlowMatchEulerDiscreteScheduler

    levels = "1.0, 0.8, 0.45, 0.0"
    graph = json.loads(TXT2IMG.read_text(encoding="utf-8"))
    graph["nodes"]["sigmas"] = {"type": "ManualSigmas", "params": {"sigmas": levels}, "inputs": {}}
    graph["nodes"]["sampler"]["inputs"]["sigmas"] = ["sigmas", "sigmas"]
    workflow = tmp_path / "sigmas.json"
    workflow.write_text(json.dumps(graph), encoding="utf-8")
    sets = txt2img_sets(
        qwen21_folder, cfg=3.0, steps=3, seed=42, width=WIDTH, height=HEIGHT, prompt=PROMPT, negative=NEGATIVE
    )
    assert run_workflow(workflow, tmp_path / "out", sets) == 0
    pipe = reference_pipeline(qwen21_folder)
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(
        pipe.scheduler.config, use_dynamic_shifting=False, shift=1.0
    )
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        true_cfg_scale=3.0,
        height=HEIGHT,
        width=WIDTH,
        sigmas=[1.0, 0.8, 0.45],  # the pipeline's grid leaves the final 0 out (the scheduler appends it)
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    diff = np.abs(rgba_picture(tmp_path / "out").astype(int) - np.asarray(image).astype(int)).max()
    print(f"qwenimage21 manual sigmas vs pipeline: max uint8 difference {diff}")
    assert diff <= 1  # the same ops on the same kernels; 1 allows a rounding edge
