"""A SIGMAS wire in a flow family other than LTX-2: Qwen-Image's loop steps through a hand-given schedule as
it is (`tiny-qwenimage`): its own schedule given as a list gives its own latents, and a list that starts below 1
keeps part of the input latent, as ComfyUI's flow models noise it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow  # builds and runs the tiny model

PROMPT, NEGATIVE = "a red square", "blurry"


def test_qwenimage_steps_through_a_given_schedule(tmp_path: Path) -> None:
    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.flow_sampling import calculate_shift
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.schedulers import make_scheduler
    from pipelines.diffusion.values import Latents
    from tests.demo_support import copy_demo_model

    folder = copy_demo_model("tiny-qwenimage", tmp_path / "tiny-qwenimage")
    settings = SamplerSettings(scheduler="default", steps=3, cfg=3.0, seed=1)
    empty = Latents(samples=torch.zeros(1, 4, 8, 8), vae_scale_factor=4)
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "mm")) as mm:
        denoiser = load_model(mm, folder).denoiser
        text = load_model(mm, folder).text_encoder
        pos, neg = encode_prompt(mm, text, PROMPT), encode_prompt(mm, text, NEGATIVE)
        native = sample(mm, denoiser, pos, neg, empty, settings).samples

        scheduler = make_scheduler("default", denoiser.scheduler_config)
        c = scheduler.config
        mu = calculate_shift(
            16,
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )  # (8 / 2) x (8 / 2) packed tokens, as the loop counts them
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / 3, 3), mu=mu)
        levels = tuple(float(s) for s in scheduler.sigmas)
        given = sample(
            mm, denoiser, pos, neg, empty, SamplerSettings(**{**settings.__dict__, "sigmas": levels})
        )
        # The same float32 ops on the same noise and the same sigma values.
        torch.testing.assert_close(given.samples, native, rtol=0, atol=1e-6)

        start = Latents(samples=torch.full((1, 4, 8, 8), 0.5), vae_scale_factor=4)
        short = (0.0, 0.0)  # one step from sigma 0: the input latent itself, no noise
        kept = sample(
            mm, denoiser, pos, neg, start, SamplerSettings(**{**settings.__dict__, "sigmas": short})
        )
        torch.testing.assert_close(kept.samples, start.samples, rtol=0, atol=1e-6)  # a zero-length step
