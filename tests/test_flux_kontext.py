"""FLUX.1 Kontext (issue 26's editing item): a Reference Latent on a Flux prompt gives the picture diffusers'
`FluxKontextPipeline` gives for the same files, picture, prompt, seed, steps and guidance (float32, CPU).
ComfyUI's `flux_kontext_dev_basic` template runs in tests/test_comfy_template_runs.py.

The tiny random-weight Flux demo stands in for Kontext's weights: Kontext is FLUX.1's transformer, trained to
read the reference tokens, so the same architecture runs either.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.vae import decode, encode
from pipelines.diffusion.values import Latents

pytestmark = pytest.mark.slow  # builds the tiny Flux and runs both pipelines

PROMPT = "make the square a yellow triangle"
# The same float32 kernels in the same order on both sides; 1e-4 is the parity suite's bound (rounding of
# the attention over the longer sequence).
TOLERANCE = 1e-4


def _picture(width: int = 64, height: int = 48) -> Image.Image:
    ys, xs = np.mgrid[0:height, 0:width]
    rgb = np.stack([xs * 255 // (width - 1), ys * 255 // (height - 1), np.full_like(xs, 60)], -1)
    rgb[12:30, 16:40] = (230, 230, 30)
    return Image.fromarray(rgb.astype(np.uint8))


def test_reference_latent_on_flux_matches_flux_kontext_pipeline() -> None:
    from diffusers import DiffusionPipeline, FluxKontextPipeline

    folder = ensure_demo_model("tiny-flux")
    picture = _picture()
    steps, guidance, seed = 3, 3.5, 42

    base = DiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe = FluxKontextPipeline(**base.components)
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(
        image=picture,
        prompt=PROMPT,
        height=48,
        width=64,
        num_inference_steps=steps,
        guidance_scale=guidance,
        generator=torch.Generator("cpu").manual_seed(seed),
        output_type="pt",
        _auto_resize=False,  # the picture is already a size the VAE takes; no Kontext-size scaling
        max_area=64 * 48,  # else the output is rescaled to a megapixel (the aspect ratio kept)
    ).images

    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    try:
        model = load_model(mm, "demo:tiny-flux")
        pixels = torch.from_numpy(np.asarray(picture, dtype=np.float32) / 255.0)[None]  # (1, H, W, 3)
        reference = encode(mm, model.vae, pixels)
        positive = replace(encode_prompt(mm, model.text_encoder, PROMPT), references=(reference,))
        scale = model.vae.scale_factor
        latents = Latents(torch.zeros(1, model.vae.latent_channels, 48 // scale, 64 // scale), scale)
        settings = SamplerSettings(scheduler="euler", steps=steps, cfg=guidance, seed=seed)
        ours = decode(mm, model.vae, sample(mm, model.denoiser, positive, None, latents, settings))
    finally:
        mm.close()
    ours = ours.permute(0, 3, 1, 2)
    assert ours.shape == theirs.shape == (1, 3, 48, 64)
    diff = (ours - theirs).abs().max().item()
    print(f"Kontext parity: max abs diff {diff:.3g}")
    assert diff <= TOLERANCE


def test_the_reference_changes_the_picture() -> None:
    """Without the reference the same seed gives another picture: the reference tokens are read."""
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    try:
        model = load_model(mm, "demo:tiny-flux")
        pixels = torch.from_numpy(np.asarray(_picture(), dtype=np.float32) / 255.0)[None]
        plain = encode_prompt(mm, model.text_encoder, PROMPT)
        edited = replace(plain, references=(encode(mm, model.vae, pixels),))
        scale = model.vae.scale_factor
        latents = Latents(torch.zeros(1, model.vae.latent_channels, 48 // scale, 64 // scale), scale)
        settings = SamplerSettings(scheduler="euler", steps=2, cfg=3.5, seed=1)
        a = sample(mm, model.denoiser, plain, None, latents, settings).samples
        b = sample(mm, model.denoiser, edited, None, latents, settings).samples
    finally:
        mm.close()
    assert (a - b).abs().max().item() > 1e-3
