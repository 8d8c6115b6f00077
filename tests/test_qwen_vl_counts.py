"""The Qwen-VL encoders' declared prompt sizes against transformers: what `app plan` counts without importing
transformers' processor must be what the real preprocessing makes.

`picture_grid` (pipelines/diffusion/qwen_vl_counts.py) against `Qwen2VLImageProcessorPil`'s `image_grid_thw`,
read from the same preprocessor_config.json, for tiny, odd, very wide and very large pictures: on the
tiny demo folders' processor settings (Qwen-Image-Edit's Qwen2-VL ones, Qwen-Image 2.1's and MiniMax H3's
Qwen3-VL ones) and on the two layouts released folders ship (Qwen2.5-VL's top-level min/max pixels,
Qwen3-VL's `size`). Then each encoder's (tokens, patches) before its use against the inputs its real
preprocessing builds inside the use (transformers' tokenizer and processor), on the tiny demo folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from tests.family_support import demo_folder

# (width, height): 1 px, below the minimum area, odd sides, square, 199:1 (the processor takes up to 200:1),
# above every maximum area.
SIZES = [
    (1, 1),
    (2, 3),
    (13, 7),
    (28, 28),
    (60, 90),
    (77, 77),
    (199, 1),
    (1, 150),
    (333, 17),
    (1023, 769),
    (5000, 27),
    (4000, 3000),
]
# Released folders allow 12.8 and 16.8 megapixels: pictures below that keep the processor's arrays small.
RELEASED_SIZES = [(1, 1), (17, 5), (199, 1), (640, 480), (1999, 1001)]
QWEN25_VL = {  # Qwen-Image-Edit's processor/preprocessor_config.json layout: the pixel range at the top level
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_processor_type": "Qwen2VLImageProcessor",
}
QWEN3_VL = {  # Qwen3-VL's (Qwen-Image 2.1, MiniMax H3): the pixel range as `size`
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessorFast",
}


def _demo_processor(name: str) -> Any:
    """The image processor a tiny demo folder saves in processor/ (demo_models builds them so)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if name == "qwenimage_edit":
        from pipelines.diffusion.demo_qwenimage_edit import tiny_qwen2vl_image_processor

        return tiny_qwen2vl_image_processor()
    if name == "qwenimage21":
        from pipelines.diffusion.demo_qwenimage21 import tiny_qwen3vl_image_processor

        return tiny_qwen3vl_image_processor()
    from pipelines.diffusion.demo_minimax import TINY_IMAGE_PROCESSOR

    return Qwen2VLImageProcessorPil(**TINY_IMAGE_PROCESSOR)


def _assert_grids_match(folder: Path, sizes: list[tuple[int, int]]) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.qwen_vl_counts import picture_grid, vision_settings

    settings = vision_settings(folder, "the test's")
    processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder))
    for width, height in sizes:
        grid = processor(images=[Image.new("RGB", (width, height))], return_tensors="pt")["image_grid_thw"]
        assert picture_grid(settings, width, height) == tuple(grid[0].tolist()), (folder.name, width, height)
    # Past 200:1 both refuse the picture.
    with pytest.raises(ValueError, match="aspect ratio"):
        processor(images=[Image.new("RGB", (201, 1))])
    with pytest.raises(ValueError, match="aspect ratio"):
        picture_grid(settings, 201, 1)


@pytest.mark.slow  # imports transformers' image processor and cuts 12-megapixel pictures (seconds)
@pytest.mark.parametrize("name", ["qwenimage_edit", "qwenimage21", "minimax"])
def test_picture_grids_equal_the_demo_folders_image_processors(name: str, tmp_path: Path) -> None:
    _demo_processor(name).save_pretrained(str(tmp_path))
    _assert_grids_match(tmp_path, SIZES)


# Both spellings in one file: the top-level pixel range overrides `size` (the processor's __init__).
BOTH = {**QWEN25_VL, "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}}


@pytest.mark.slow  # imports transformers' image processor (seconds)
@pytest.mark.parametrize("config", [QWEN25_VL, QWEN3_VL, BOTH], ids=["qwen2.5-vl", "qwen3-vl", "both"])
def test_picture_grids_equal_the_processor_on_released_config_layouts(config: dict, tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config), encoding="utf-8")
    _assert_grids_match(tmp_path, RELEASED_SIZES)


def test_a_folder_without_a_preprocessor_config_is_named() -> None:
    from pipelines.diffusion.qwen_vl_counts import vision_settings

    with pytest.raises(ValueError, match=r"nowhere: no preprocessor_config.json \(the keyframes need it\)"):
        vision_settings(Path("nowhere"), "the keyframes need it")


def _image(width: int, height: int, seed: int = 0) -> torch.Tensor:
    """An IMAGE (1, H, W, 3) of seeded noise."""
    return torch.from_numpy(np.random.default_rng(seed).random((1, height, width, 3), dtype=np.float32))


PROMPTS = ["make the circle yellow", "", "Ünïcödé 漢字 🙂\ttabs  and\nnewlines <|im_end|>"]
PICTURES = [[(60, 90)], [(60, 90), (90, 60), (77, 77)], [(3, 5)], [(1500, 997)]]


def _text_encoder(folder: Path, data_dir: Path) -> Any:
    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.loading import load_model

    mm = MemoryManager(MemoryConfig(device="cpu", data_dir=data_dir))
    return load_model(mm, folder).text_encoder  # handles only: nothing is loaded before a use


edit_folder = demo_folder("tiny-qwenimage-edit")


@pytest.mark.slow  # the folder fixture builds the tiny model; the processor and tokenizer are transformers'
@pytest.mark.parametrize("plus", [True, False], ids=["plus", "first-release"])
def test_edit_counts_equal_the_processed_inputs(edit_folder: Path, tmp_path: Path, plus: bool) -> None:
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.qwenimage_edit_text import edit_counts, edit_inputs

    ref = _text_encoder(edit_folder, tmp_path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(edit_folder / "processor"))
    tokenizer = AutoTokenizer.from_pretrained(str(edit_folder / "processor"))
    for sizes in PICTURES if plus else [p for p in PICTURES if len(p) == 1]:
        images = [_image(w, h, i) for i, (w, h) in enumerate(sizes)]
        for text in PROMPTS:
            for areas in ((64 * 96, 56 * 84), (1024 * 1024, 384 * 384)):  # the tests' and the pipelines'
                kwargs = dict(plus=plus, vae_area=areas[0], vl_area=areas[1])
                real = edit_inputs(image_processor, tokenizer, text, images, multiple=16, **kwargs)
                counted = edit_counts(ref, text, images, **kwargs)
                assert counted == (real.input_ids.shape[1], real.pixel_values.shape[0]), (sizes, text, areas)


qwenimage21_folder = demo_folder("tiny-qwenimage21")


@pytest.mark.slow  # the folder fixture builds the tiny model; the processor and tokenizer are transformers'
def test_qwenimage21_counts_equal_the_processed_inputs(qwenimage21_folder: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.qwenimage21_text import picture_counts, picture_inputs

    ref = _text_encoder(qwenimage21_folder, tmp_path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(qwenimage21_folder / "processor"))
    tokenizer = AutoTokenizer.from_pretrained(str(qwenimage21_folder / "processor"))
    for sizes in [[], *PICTURES]:
        images = [_image(w, h, i) for i, (w, h) in enumerate(sizes)]
        for text in PROMPTS:
            for resolution in (64, 0, 1024):  # the workflow's, the pictures' own area, the pipeline's
                real = picture_inputs(image_processor, tokenizer, text, images, resolution=resolution)
                counted = picture_counts(ref, text, images, resolution=resolution)
                patches = 0 if real.pixel_values is None else real.pixel_values.shape[0]
                assert counted == (real.input_ids.shape[1], patches), (sizes, text, resolution)


minimax_folder = demo_folder("tiny-minimax")


@pytest.mark.slow  # the folder fixture builds the tiny model; the processor and tokenizer are transformers'
def test_minimax_token_count_equals_the_presentation(minimax_folder: Path, tmp_path: Path) -> None:
    from pipelines.diffusion.minimax_text import minimax_presentation, minimax_token_count

    ref = _text_encoder(minimax_folder, tmp_path)
    for sizes in [[], [(48, 32)], [(48, 32), (33, 77)], [(1, 1)], [(4000, 3000)]]:
        keyframes = tuple(Image.new("RGB", size) for size in sizes)
        for text in PROMPTS:
            ids, tags, _, _ = minimax_presentation(ref, text, keyframes)
            assert minimax_token_count(ref, text, keyframes) == len(ids) == len(tags), (sizes, text)
