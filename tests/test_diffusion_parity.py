"""Parity: our split pipeline (text encode -> sampler -> VAE decode, each through MemoryManager.use) gives
the image diffusers' own pipeline gives for the same files, seed, scheduler, steps and cfg (float32, CPU).

Tiny random-weight demo models (built from configs, fixed seeds) stand in for real ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from diffusers import (
    DDIMScheduler,
    DiffusionPipeline,
    DPMSolverMultistepScheduler,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    UniPCMultistepScheduler,
)

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.vae import decode
from pipelines.diffusion.values import Latents

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

DIFFUSERS_SCHEDULERS = {
    "dpmpp_2m": DPMSolverMultistepScheduler,
    "euler": EulerDiscreteScheduler,
    "euler_ancestral": EulerAncestralDiscreteScheduler,
    "ddim": DDIMScheduler,
    "unipc": UniPCMultistepScheduler,
}
PROMPT = "a small yellow triangle on a black background"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def data_dir():
    """The session's data dir (tests/conftest.py), where demo models are built once and shared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield Path(os.environ["NODELOOM_DATA_DIR"])


def ours(
    name: str,
    scheduler: str,
    *,
    steps: int,
    cfg: float,
    seed: int,
    batch: int = 1,
    negative: str | None = "",
    size: int = 64,
    policy: str = "none",
) -> torch.Tensor:
    mm = MemoryManager(MemoryConfig(device="cpu", policy=policy))
    model = load_model(mm, f"demo:{name}")
    positive = encode_prompt(mm, model.text_encoder, PROMPT)
    neg = encode_prompt(mm, model.text_encoder, negative) if negative is not None else None
    scale = model.vae.scale_factor
    latents = Latents(torch.zeros(batch, model.vae.latent_channels, size // scale, size // scale), scale)
    settings = SamplerSettings(scheduler=scheduler, steps=steps, cfg=cfg, seed=seed)
    image = decode(mm, model.vae, sample(mm, model.denoiser, positive, neg, latents, settings))
    return image.permute(0, 3, 1, 2)  # (B, C, H, W) like diffusers' output_type="pt"


def theirs(
    name: str,
    scheduler: str,
    *,
    steps: int,
    cfg: float,
    seed: int,
    batch: int = 1,
    negative: str | None = "",
    size: int = 64,
) -> torch.Tensor:
    pipe = DiffusionPipeline.from_pretrained(str(ensure_demo_model(name)), dtype=torch.float32)
    if name not in ("tiny-flux", "tiny-sd3"):  # flow models keep their flow-matching Euler ("euler" for us)
        pipe.scheduler = DIFFUSERS_SCHEDULERS[scheduler].from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    extra = {"use_resolution_binning": False, "clean_caption": False} if name == "tiny-pixart" else {}
    return pipe(
        PROMPT,
        negative_prompt=negative,
        height=size,
        width=size,
        num_inference_steps=steps,
        guidance_scale=cfg,
        num_images_per_prompt=batch,
        generator=torch.Generator("cpu").manual_seed(seed),
        output_type="pt",
        **extra,
    ).images


# "sequential" unloads each model after use and reloads it next time: the numbers must not change.
@pytest.mark.parametrize(
    ("name", "scheduler", "policy"),
    [
        ("tiny-sd", "dpmpp_2m", "sequential"),
        ("tiny-sd", "euler_ancestral", "none"),
        ("tiny-sd", "ddim", "none"),
        ("tiny-sdxl", "euler", "sequential"),
        ("tiny-sdxl", "dpmpp_2m", "none"),
        ("tiny-pixart", "dpmpp_2m", "sequential"),
        ("tiny-pixart", "unipc", "none"),
        ("tiny-sd3", "euler", "sequential"),  # flow matching with classic CFG; three text encoders
        (
            "tiny-flux",
            "euler",
            "sequential",
        ),  # distilled guidance: cfg goes into the transformer, no negative
    ],
)
def test_image_matches_diffusers_pipeline(data_dir, name: str, scheduler: str, policy: str) -> None:
    a = ours(name, scheduler, steps=5, cfg=4.0, seed=42, policy=policy)
    b = theirs(name, scheduler, steps=5, cfg=4.0, seed=42)
    assert a.shape == b.shape == (1, 3, 64, 64)
    diff = (a - b).abs().max().item()
    print(f"parity {name} {scheduler}: max abs diff {diff:.3g}")
    assert diff <= TOLERANCE


def test_batch_and_rectangular_size_match(data_dir) -> None:
    a = ours("tiny-sd", "euler_ancestral", steps=3, cfg=3.0, seed=7, batch=2)
    b = theirs("tiny-sd", "euler_ancestral", steps=3, cfg=3.0, seed=7, batch=2)
    assert a.shape == (2, 3, 64, 64)
    assert (a - b).abs().max().item() <= TOLERANCE
    # Two images of one batch get different noise.
    assert (a[0] - a[1]).abs().max().item() > 1e-3


def test_cfg_one_skips_the_negative_like_diffusers(data_dir) -> None:
    # guidance_scale 1 disables classifier-free guidance in the pipelines; our Sampler does the same.
    a = ours("tiny-sdxl", "euler", steps=3, cfg=1.0, seed=3, negative=None)
    b = theirs("tiny-sdxl", "euler", steps=3, cfg=1.0, seed=3, negative=None)
    assert (a - b).abs().max().item() <= TOLERANCE


def test_seed_changes_the_image(data_dir) -> None:
    a = ours("tiny-sd", "dpmpp_2m", steps=2, cfg=4.0, seed=1)
    b = ours("tiny-sd", "dpmpp_2m", steps=2, cfg=4.0, seed=2)
    assert (a - b).abs().max().item() > 1e-3


def test_flow_models_refuse_ddpm_schedulers(data_dir) -> None:
    with pytest.raises(ValueError, match="flow-matching"):
        ours("tiny-flux", "dpmpp_2m", steps=2, cfg=3.5, seed=0)


@pytest.mark.parametrize("name", ["tiny-sd3", "tiny-flux", "tiny-sd"])
def test_image_to_image_runs_the_last_part_of_the_schedule(data_dir, name: str) -> None:
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    model = load_model(mm, f"demo:{name}")
    positive = encode_prompt(mm, model.text_encoder, PROMPT)
    negative = encode_prompt(mm, model.text_encoder, "")
    start = Latents(
        torch.randn(1, model.vae.latent_channels, 8, 8, generator=torch.Generator().manual_seed(0)),
        8,
        source="encoded",
    )
    steps: list[int] = []
    scheduler = "euler" if name != "tiny-sd" else "dpmpp_2m"
    out = sample(
        mm,
        model.denoiser,
        positive,
        negative,
        start,
        SamplerSettings(scheduler=scheduler, steps=6, cfg=3.0, seed=1, denoise=0.5),
        on_step=lambda info: steps.append(info.total),
    )
    assert steps == [3, 3, 3]
    assert out.samples.shape == start.samples.shape and torch.isfinite(out.samples).all()
    assert not torch.equal(out.samples, start.samples)
