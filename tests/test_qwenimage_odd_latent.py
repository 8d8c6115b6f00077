"""Qwen-Image on a latent with odd sides runs, as ComfyUI runs it (FireRed-Image-Edit 1.1's template).

ComfyUI pads each model input circularly to the 2x2 patches and crops the output, so a picture sized by
ImageScaleToTotalPixels (sides multiples of 1, not 16) runs there; the loop here refused it. Now the latent
(and any reference) is padded the same way for the run and the result cropped (`qwenimage_sampling`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pipelines.diffusion.qwenimage_sampling import _pad_even
from tests.family_support import Txt2Img, demo_folder

folder = demo_folder("tiny-qwenimage")


def test_padding_is_circular_at_the_bottom_and_right() -> None:
    x = torch.arange(15.0).reshape(1, 1, 3, 5)
    padded = _pad_even(x)
    assert padded.shape == (1, 1, 4, 6)
    assert torch.equal(padded[..., :3, :5], x)  # the latent itself untouched, at the top left
    assert torch.equal(padded[..., 3, :5], x[..., 0, :])  # the extra row is the first row (circular)
    assert torch.equal(padded[..., :3, 5], x[..., :, 0])  # the extra column the first column
    assert torch.equal(_pad_even(padded), padded)  # even sides: nothing added


def test_an_odd_latent_gives_a_picture_of_its_size(folder: Path, tmp_path: Path) -> None:
    # 44 x 52 px over the tiny VAE's 4 px per latent: an 11 x 13 latent, odd both ways.
    picture = Txt2Img("a small yellow triangle", "blurry", 44, 52)(folder, tmp_path, cfg=1.0, steps=2)
    assert picture.shape == (52, 44, 3)
    assert np.asarray(picture).std() > 1  # a decoded picture, not a flat fill
