"""ControlNet: our sampler with a ControlNet hint gives diffusers' StableDiffusionControlNetPipeline's image.

A tiny random ControlNet (built from the tiny SD UNet's config with a fixed seed, its zero convolutions
given random weights so that it really steers) and a tiny SD model; float32 on CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from diffusers import (
    ControlNetModel,
    DPMSolverMultistepScheduler,
    StableDiffusionControlNetPipeline,
    StableDiffusionXLControlNetPipeline,
)

from memory import LoadEvent, MemoryConfig, MemoryManager, UnloadEvent
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.controlnet import ControlHint, attach_control, load_controlnet
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.vae import decode
from pipelines.diffusion.values import Latents

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

PROMPT = "a small yellow triangle on a black background"


def _build(name: str, tmp_path_factory) -> tuple[Path, Path]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        assert os.environ["NODELOOM_DATA_DIR"]
        sd = ensure_demo_model(name)
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(sd / "unet")
    torch.manual_seed(0)
    controlnet = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(8, 16, 16, 16))
    with torch.no_grad():
        for name, p in controlnet.named_parameters():
            if "controlnet_down_blocks" in name or "controlnet_mid_block" in name or "conv_out" in name:
                p.normal_(0.0, 0.05)
    folder = tmp_path_factory.mktemp("controlnet")
    controlnet.save_pretrained(folder)
    return sd, folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    return _build("tiny-sd", tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_xl(tmp_path_factory) -> tuple[Path, Path]:
    return _build("tiny-sdxl", tmp_path_factory)


def _control_image() -> torch.Tensor:
    image = torch.zeros(1, 64, 64, 3)
    image[0, 16:48, 16:48] = 1.0
    return image


def ours(
    sd: Path,
    cn: Path,
    *,
    strength: float,
    start: float,
    end: float,
    negative_too: bool,
    policy: str = "none",
    mm: MemoryManager | None = None,
) -> torch.Tensor:
    own = mm is None
    mm = mm or MemoryManager(MemoryConfig(device="cpu", policy=policy))
    try:
        model = load_model(mm, str(sd))
        controlnet = load_controlnet(mm, cn, torch.float32)
        hint = ControlHint(controlnet, _control_image(), strength, start, end)
        positive = attach_control(encode_prompt(mm, model.text_encoder, PROMPT), hint)
        negative = encode_prompt(mm, model.text_encoder, "")
        if negative_too:
            negative = attach_control(negative, hint)
        latents = Latents(torch.zeros(1, 4, 8, 8), 8)
        settings = SamplerSettings(scheduler="dpmpp_2m", steps=5, cfg=4.0, seed=7)
        image = decode(mm, model.vae, sample(mm, model.denoiser, positive, negative, latents, settings))
        return image.permute(0, 3, 1, 2)
    finally:
        if own:
            mm.close()


def theirs(
    sd: Path, cn: Path, *, strength: float, start: float, end: float, xl: bool = False
) -> torch.Tensor:
    pipeline = StableDiffusionXLControlNetPipeline if xl else StableDiffusionControlNetPipeline
    extra = {} if xl else {"safety_checker": None, "requires_safety_checker": False}
    pipe = pipeline.from_pretrained(
        str(sd),
        controlnet=ControlNetModel.from_pretrained(cn),
        **extra,
    )
    pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    return pipe(
        PROMPT,
        image=_control_image().permute(0, 3, 1, 2),
        negative_prompt="",
        height=64,
        width=64,
        num_inference_steps=5,
        guidance_scale=4.0,
        controlnet_conditioning_scale=strength,
        control_guidance_start=start,
        control_guidance_end=end,
        generator=torch.Generator("cpu").manual_seed(7),
        output_type="pt",
    ).images


@pytest.mark.parametrize(("strength", "start", "end"), [(1.0, 0.0, 1.0), (0.7, 0.2, 0.8)])
def test_controlnet_matches_diffusers_pipeline(tiny, strength: float, start: float, end: float) -> None:
    sd, cn = tiny
    mine = ours(sd, cn, strength=strength, start=start, end=end, negative_too=True, policy="sequential")
    ref = theirs(sd, cn, strength=strength, start=start, end=end)
    assert (mine - ref).abs().max().item() <= 1e-4


def test_sdxl_controlnet_matches_diffusers_pipeline(tiny_xl) -> None:
    sd, cn = tiny_xl
    mine = ours(sd, cn, strength=0.8, start=0.0, end=1.0, negative_too=True, policy="sequential")
    ref = theirs(sd, cn, strength=0.8, start=0.0, end=1.0, xl=True)
    assert (mine - ref).abs().max().item() <= 1e-4


def test_controlnet_steers_and_strength_zero_is_no_controlnet(tiny) -> None:
    sd, cn = tiny
    with_cn = ours(sd, cn, strength=1.0, start=0.0, end=1.0, negative_too=True)
    zero = ours(sd, cn, strength=0.0, start=0.0, end=1.0, negative_too=True)
    positive_only = ours(sd, cn, strength=1.0, start=0.0, end=1.0, negative_too=False)
    assert (with_cn - zero).abs().max().item() > 1e-3
    assert (positive_only - with_cn).abs().max().item() > 1e-4  # the negative half was left unsteered


def test_sequential_loads_the_controlnet_with_the_denoiser_and_unloads_it_after(tiny) -> None:
    sd, cn = tiny
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    try:
        ours(sd, cn, strength=1.0, start=0.0, end=1.0, negative_too=True, mm=mm)
        loads = [e.component for e in mm.telemetry.events(LoadEvent)]
        unloads = [e.component for e in mm.telemetry.events(UnloadEvent)]
        assert loads.count("controlnet") == 1 and unloads.count("controlnet") == 1, (loads, unloads)
        # Loaded after the UNet, unloaded before the VAE comes in.
        assert loads.index("controlnet") == loads.index("unet") + 1
        assert unloads.index("controlnet") < loads.index("vae")
        handle = next(h for h in mm.ledger.handles.values() if h.spec.kind == "controlnet")
        assert handle.weight_bytes and handle.weight_bytes > 0 and handle.module is None
    finally:
        mm.close()
