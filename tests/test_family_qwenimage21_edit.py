"""Qwen-Image 2.1 editing end to end: `app --run edit_qwenimage21.json` (Load Image -> Text Encode (Qwen-Image
2.1) -> Sampler) gives `QwenImage21Pipeline(image=...)`'s picture for one and three pictures; our Qwen3-VL
inputs equal `Qwen3VLProcessor`'s; `stream` equals `none`.

The folder is `demo:tiny-qwenimage21` (random weights, fixed seeds), saved and loaded by path. Theirs is the
pipeline with a real `Qwen3VLProcessor` built without a video processor (torchvision is not installed). Both
sides run at `output_resolution` 96 (the pipeline's is 1024): a 2:3 picture then becomes 64 x 128 px.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.family_support import demo_folder, run_workflow
from tests.test_family_qwenimage21 import reference_pipeline, rgba_picture

REPO = Path(__file__).resolve().parent.parent
EDIT = REPO / "resources/workflows/edit_qwenimage21.json"
PROMPT = "make the circle a yellow triangle"
NEGATIVE = "blurry bad quality"
RESOLUTION = 96


folder = demo_folder("tiny-qwenimage21")


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (60, 90)) -> Path:
    """A smooth random picture (w x h): not a multiple of anything, so every resize does something."""
    w, h = size
    rng = np.random.RandomState(seed)
    ramp = np.linspace(0, 1, w * h * 3).reshape(h, w, 3)
    Image.fromarray((255 * (0.6 * ramp + 0.4 * rng.rand(h, w, 3))).astype(np.uint8)).save(path)
    return path


def edit_workflow(tmp: Path, pictures: int) -> Path:
    """The shipped edit graph with `pictures` Load Image nodes wired to image1..imageN."""
    data = json.loads(EDIT.read_text(encoding="utf-8"))
    for i in range(2, pictures + 1):
        data["nodes"][f"image{i}"] = {"type": "LoadImage", "params": {"path": ""}, "inputs": {}}
        data["nodes"]["encode"]["inputs"][f"image{i}"] = [f"image{i}", "image"]
    path = tmp / f"edit{pictures}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def ours(
    folder: Path, out: Path, images: list[Path], *, cfg: float = 3.0, steps: int = 3, extra: tuple = ()
) -> np.ndarray:
    sets: dict[str, object] = {
        "load.path": str(folder),
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "encode.prompt": PROMPT,
        "encode.negative_prompt": NEGATIVE,
        "encode.resolution": RESOLUTION,
    }
    for i, image in enumerate(images):
        sets["image.path" if i == 0 else f"image{i + 1}.path"] = str(image)
    workflow = edit_workflow(out.parent, len(images)) if len(images) > 1 else EDIT
    assert run_workflow(workflow, out, sets, extra) == 0
    return rgba_picture(out)


def theirs(folder: Path, images: list[Path], *, cfg: float = 3.0, steps: int = 3) -> np.ndarray:
    image = reference_pipeline(folder)(
        PROMPT,
        image=[Image.open(p).convert("RGB") for p in images],
        negative_prompt=NEGATIVE,
        true_cfg_scale=cfg,
        output_resolution=RESOLUTION,
        num_inference_steps=steps,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    return np.asarray(image)


@pytest.mark.slow  # loads the tiny model three times
def test_cli_edit_matches_the_pipeline_with_one_picture(folder: Path, tmp_path: Path) -> None:
    image = picture(tmp_path / "in.png")
    a = ours(folder, tmp_path / "out", [image])
    b = theirs(folder, [image])
    assert a.shape == b.shape == (128, 64, 4)  # the picture's 2:3 aspect at about 96 x 96 px, multiples of 32
    assert b[..., :3].std() > 5  # a real picture, not a flat one both sides could agree on by accident
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"qwenimage21 edit parity, 1 picture: max uint8 difference {diff}")
    assert diff <= 1
    # The picture mattered: another input picture of the same size gives another output.
    other = ours(folder, tmp_path / "other", [picture(tmp_path / "b.png", seed=5)])
    assert not np.array_equal(a, other)


@pytest.mark.slow  # loads the tiny model twice
def test_cli_edit_matches_the_pipeline_with_three_pictures(folder: Path, tmp_path: Path) -> None:
    images = [
        picture(tmp_path / "a.png", 1, (60, 90)),
        picture(tmp_path / "b.png", 2, (100, 40)),
        picture(tmp_path / "c.png", 3, (90, 60)),  # the last picture's aspect sets the output's
    ]
    a = ours(folder, tmp_path / "out", images)
    b = theirs(folder, images)
    assert a.shape == b.shape == (64, 128, 4)
    diff = np.abs(a.astype(int) - b.astype(int)).max()
    print(f"qwenimage21 edit parity, 3 pictures: max uint8 difference {diff}")
    assert diff <= 1


@pytest.mark.slow  # two runs of the tiny model
def test_edit_with_stream_offload_gives_the_same_picture(folder: Path, tmp_path: Path) -> None:
    image = picture(tmp_path / "in.png")
    plain = ours(folder, tmp_path / "none", [image], extra=("--offload", "none"))
    streamed = ours(
        folder, tmp_path / "stream", [image], extra=("--offload", "stream", "--ram-budget", "2GiB")
    )
    assert np.array_equal(plain, streamed)


@pytest.mark.slow  # builds the tiny model's processor
def test_our_vl_inputs_equal_the_qwen3vl_processors(folder: Path, tmp_path: Path) -> None:
    """Our picture resize, patch cutting and pad expansion against transformers' `Qwen3VLProcessor` (built
    without its video processor) on the pipeline's own template and resized pictures, for two pictures."""
    from diffusers.image_processor import VaeImageProcessor
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.demo_qwenimage21 import qwen3vl_processor
    from pipelines.diffusion.qwenimage21_text import output_size, picture_inputs

    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder / "processor"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "processor"))
    pil = [Image.open(picture(tmp_path / f"{i}.png", i, s)) for i, s in enumerate([(60, 90), (100, 40)])]
    tensors = [torch.from_numpy(np.asarray(p, dtype=np.float32) / 255)[None] for p in pil]
    ours_in = picture_inputs(
        image_processor, tokenizer, PROMPT, tensors, resolution=RESOLUTION, latent_channels=8
    )

    pipe_processor = VaeImageProcessor(vae_scale_factor=16, vae_latent_channels=8)
    resized = []
    for p in pil:
        w, h = output_size(p.width, p.height, RESOLUTION)
        resized.append(pipe_processor.resize(p.convert("RGBA"), width=w, height=h).convert("RGB"))
    slots = "<image1><|vision_start|><|image_pad|><|vision_end|> <image2><|vision_start|><|image_pad|><|vision_end|>"
    text = (
        "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n"
        f"<|im_start|>user\n{slots}{PROMPT}<|im_end|>\n<|im_start|>assistant\n"
    )
    real = qwen3vl_processor(image_processor, tokenizer)(text=[text], images=resized, return_tensors="pt")
    assert torch.equal(ours_in.input_ids, real.input_ids)
    assert torch.equal(ours_in.image_grid_thw, real.image_grid_thw)
    assert torch.equal(ours_in.pixel_values, real.pixel_values)
