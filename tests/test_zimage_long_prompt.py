"""A long prompt on the tiny Z-Image gives ZImagePipeline's picture (issue 32's template runs).

ComfyUI's Z-Image templates carry prompts of several hundred words; the tiny byte-level tokenizer makes
those more tokens still. The tiny transformer once had 256 caption positions (the released one has 1536),
so such a prompt failed in the rotary tables before a step ran. Here a prompt of more than 256 tokens runs
through `app --run` and gives the diffusers pipeline's picture, both sides cutting it at 512 tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.diffusion.demo_zimage import TINY_ZIMAGE, tiny_qwen_tokenizer
from tests.family_support import Txt2Img, assert_same_picture, demo_folder

# Many whole-word tokens of the tiny tokenizer's corpus, plus some bytes it only knows one by one.
PROMPT = "a photo of a small yellow cat on a red house in the blue sky, high quality, zesty! " * 30
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 32, 40

folder = demo_folder("tiny-zimage")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)


def test_the_prompt_is_longer_than_the_old_caption_table() -> None:
    tokens = len(tiny_qwen_tokenizer()(PROMPT).input_ids)
    assert tokens > 256 + 32  # past the old table even after the caption is padded to a multiple of 32
    assert TINY_ZIMAGE["axes_lens"][0] >= 512 + 32  # the 512 tokens both sides keep, padded, fit


@pytest.mark.slow  # two tiny Z-Image runs with a 512-token caption: a few seconds each on a busy CPU
def test_long_prompt_matches_zimage_pipeline(folder: Path, tmp_path: Path) -> None:
    from diffusers import ZImagePipeline

    pipe = ZImagePipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_inference_steps=2,
        guidance_scale=3.0,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    a = ours(folder, tmp_path, cfg=3.0, steps=2)
    assert_same_picture(a, np.asarray(theirs.convert("RGB")), (HEIGHT, WIDTH, 3), "zimage long prompt")
