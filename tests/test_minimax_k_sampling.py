"""ComfyUI's samplers on MiniMax H3 (`pipelines/diffusion/minimax_k_sampling.py`): the audio carried on the
video clock, Euler over it against the model's own two-schedule loop, and `res_multistep` against a re-write
of ComfyUI's code (its sigmas, its MiniMax H3 forward's audio conversion, CONST's clean estimate, its
`res_multistep`) on the tiny model; the FastH3 template keeps its sampler at import.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

PROMPT = "a small yellow square moving on a black background"
# 32x32 px = 4x4 latents with the tiny 8x VAE (2x2 patches a frame), 124 frames = 37 latent frames.
WIDTH, HEIGHT, FRAMES = 32, 32, 124


def _shifted(base: float, shift: float) -> float:
    return shift * base / (1 + (shift - 1) * base)


def test_the_audio_sigma_comes_from_the_video_one_and_the_carried_audio_is_a_flow_interpolant() -> None:
    """On one base grid, the audio sigma derived from the video sigma is the audio schedule's own, and the
    audio carried as x_a sigma_v / sigma_a is sigma_v noise + (1 - sigma_v) (shift_v / shift_a) audio_0."""
    from pipelines.diffusion.minimax_k_sampling import time_shift_sigma

    noise, clean = 0.7, -1.3
    for base in (1.0, 0.9, 0.5, 0.25, 0.01):
        sigma_v, sigma_a = _shifted(base, 12.0), _shifted(base, 3.0)
        assert math.isclose(time_shift_sigma(sigma_v, 12.0, 3.0), sigma_a, rel_tol=1e-12)
        x_a = sigma_a * noise + (1 - sigma_a) * clean
        carried = x_a * sigma_v / sigma_a
        assert math.isclose(carried, sigma_v * noise + (1 - sigma_v) * 4.0 * clean, rel_tol=1e-12)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """(memory manager, denoiser, positive, empty latent) of the tiny MiniMax H3, built and loaded once."""
    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.demo_models import save_demo_model
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.minimax_vae import empty_minimax_latent

    tmp = tmp_path_factory.mktemp("minimax_k")
    folder = save_demo_model("tiny-minimax", tmp / "tiny-minimax")
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp / "memory")) as mm:
        loaded = load_model(mm, str(folder))
        positive = encode_prompt(mm, loaded.text_encoder, PROMPT)
        empty = empty_minimax_latent(loaded.vae, loaded.denoiser, WIDTH, HEIGHT, FRAMES)
        yield mm, loaded.denoiser, positive, empty


@pytest.mark.slow  # the tiny model: two 2-step runs
def test_euler_over_the_carried_state_is_the_models_own_two_schedule_loop(tiny) -> None:
    from pipelines.diffusion.minimax_k_sampling import sample_minimax_k
    from pipelines.diffusion.minimax_sampling import sample_minimax
    from pipelines.diffusion.sampling import SamplerSettings

    mm, denoiser, positive, empty = tiny
    own = sample_minimax(mm, denoiser, positive, None, empty, SamplerSettings(scheduler="default", steps=2))
    k = SamplerSettings(scheduler="k_euler", sigma_schedule="simple", steps=2)
    ours = sample_minimax_k(mm, denoiser, positive, empty, k)
    # The same Euler steps written two ways (two blends at their own sigmas, one over the carried state), the
    # sigmas computed in float32 along different paths: differences are float32 rounding, ~1e-6 here.
    assert torch.allclose(ours.samples, own.samples, atol=1e-4)
    assert torch.allclose(ours.audio, own.audio, atol=1e-4)
    assert own.audio.abs().max() > 0.1  # a sound track came out, not zeros


def _comfy_simple_sigmas(shift: float, steps: int) -> torch.Tensor:
    """ComfyUI's `simple` scheduler over ModelSamplingDiscreteFlow's 1000 levels, re-written."""
    t = torch.arange(1, 1001, dtype=torch.float32) / 1000
    levels = shift * t / (1 + (shift - 1) * t)
    stride = len(levels) / steps
    return torch.tensor([float(levels[-(1 + int(x * stride))]) for x in range(steps)] + [0.0])


def _comfy_res_multistep(model, x: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
    """comfy/k_diffusion/sampling.py `res_multistep` at eta 0 (sample_res_multistep), re-written."""
    old_denoised = old_sigma_down = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i])
        sigma_down = sigmas[i + 1]  # eta 0: no noise added back
        if sigma_down == 0 or old_denoised is None:
            x = x + (x - denoised) / sigmas[i] * (sigma_down - sigmas[i])
        else:
            t, t_old = -sigmas[i].log(), -old_sigma_down.log()
            t_next, t_prev = -sigma_down.log(), -sigmas[i - 1].log()
            h = t_next - t
            c2 = (t_prev - t_old) / h
            phi1 = torch.expm1(-h) / -h
            phi2 = (phi1 - 1.0) / -h
            x = torch.exp(-h) * x + h * ((phi1 - phi2 / c2) * denoised + (phi2 / c2) * old_denoised)
        old_denoised, old_sigma_down = denoised, sigma_down
    return x


@pytest.mark.slow  # the tiny model: two 3-step runs
def test_res_multistep_is_comfyuis_on_the_packed_video_and_sound(tiny) -> None:
    from pipelines.diffusion.lora import use_denoiser
    from pipelines.diffusion.minimax_k_sampling import sample_minimax_k
    from pipelines.diffusion.minimax_layout import row_timesteps
    from pipelines.diffusion.minimax_sampling import packed_start, unpack_result
    from pipelines.diffusion.sampling import SamplerSettings

    mm, denoiser, positive, empty = tiny
    steps, seed, shift_v, shift_a = 3, 7, 12.0, 3.0
    settings = SamplerSettings(scheduler="k_res_multistep", sigma_schedule="simple", steps=steps, seed=seed)
    ours = sample_minimax_k(mm, denoiser, positive, empty, settings)

    # ComfyUI's side: the sampler steps [video | audio x sigma_v / sigma_a] at the video sigma; the model
    # returns -velocity, the audio one converted to the carried variable's, and CONST's x - sigma x out.
    start = packed_start(mm, denoiser, positive, empty, seed)
    n = start.x.numel()
    scale = shift_v / shift_a

    with use_denoiser(mm, denoiser) as model:

        def comfy_model(pack: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            s = float(sigma)
            base = s / (shift_v + s * (1.0 - shift_v))
            s_a = shift_a * base / (1.0 + (shift_a - 1.0) * base)
            video, carried = pack[:n].reshape(start.x.shape), pack[n:].reshape(start.audio.shape)
            audio = carried * (s_a / s)
            unique, index = row_timesteps(start.layout, 1.0 - s, 1.0 - s_a)
            v, va = model(
                hidden_states=video[None],
                audio_hidden_states=audio[None],
                encoder_hidden_states=start.text,
                timestep=unique,
                timestep_indices=index,
                return_dict=False,
                **start.fields,
            )
            out_v, out_a = -v[0].float(), -va[0].float()
            out_a = (1.0 - scale) * audio + (1.0 + (scale - 1.0) * s_a) * out_a
            return torch.cat([(video - s * out_v).flatten(), (carried - s * out_a).flatten()])

        sigmas = _comfy_simple_sigmas(shift_v, steps)
        pack = _comfy_res_multistep(
            comfy_model, torch.cat([start.x.flatten(), start.audio.flatten()]), sigmas
        )

    video, audio = pack[:n].reshape(start.x.shape), pack[n:].reshape(start.audio.shape) / scale
    theirs = unpack_result(start, video, audio, empty)
    # Same float32 model calls; the clean estimates are formed along different algebra (ComfyUI's velocity
    # conversion vs the clean audio directly): rounding differences, ~1e-6 seen.
    assert torch.allclose(ours.samples, theirs.samples, atol=1e-4)
    assert torch.allclose(ours.audio, theirs.audio, atol=1e-4)
    # and it is not Euler: the second-order step moved the result
    euler = sample_minimax_k(
        mm,
        denoiser,
        positive,
        empty,
        SamplerSettings(scheduler="k_euler", sigma_schedule="simple", steps=steps, seed=seed),
    )
    assert (euler.samples - ours.samples).abs().max() > 1e-3


@pytest.mark.slow  # imports a published template (~1 s)
def test_the_fasth3_template_keeps_res_multistep_on_minimax(tmp_path: Path) -> None:
    from app.main import main
    from tests.template_runs import template_file

    out = tmp_path / "fasth3.nodeloom.json"
    assert main(["import", str(template_file("video_fastvideo_fasth3_t2v")), "-o", str(out)]) == 0
    nodes = json.loads(out.read_text(encoding="utf-8"))["nodes"]
    sampler = next(n for n in nodes.values() if n["type"] == "Sampler")
    assert sampler["params"]["scheduler"] == "k_res_multistep"
    assert sampler["params"]["sigma_schedule"] == "simple"
    unet = next(n for n in nodes.values() if n["type"] == "LoadDenoiser")
    assert unet["params"]["family"] == "minimax"  # FastVideo's FastH3 file name is MiniMax H3's
