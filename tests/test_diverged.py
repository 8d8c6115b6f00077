"""A NaN sampler result is reported at the Sampler with its likely cause, not by a codec in a Save node."""

from __future__ import annotations

import pytest
import torch

from pipelines.diffusion.diverged import DivergedError, check_finite_latents
from pipelines.diffusion.values import Latents


def test_finite_latents_pass() -> None:
    check_finite_latents(Latents(samples=torch.zeros(1, 4, 8, 8)), 1, {"shift_terminal": 0.1})


def test_one_step_terminal_shift_names_the_steps() -> None:
    nan = torch.full((1, 4, 8, 8), float("nan"))
    with pytest.raises(DivergedError, match=r"at 1 step .*shift_terminal 0\.1.*steps to 2 or more"):
        check_finite_latents(Latents(samples=nan), 1, {"shift_terminal": 0.1})


def test_nan_sound_track_is_named() -> None:
    audio = torch.zeros(1, 8, 4, 16)
    audio[0, 0, 0, 0] = float("inf")
    latents = Latents(samples=torch.zeros(1, 4, 8, 8), audio=audio)
    with pytest.raises(DivergedError, match="sound latents contain NaN or infinite") as err:
        check_finite_latents(latents, 20, {})
    assert "the sampler's sound latents" in str(err.value) and "latents and" not in str(err.value)
