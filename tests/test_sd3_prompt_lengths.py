"""SD3 under CFG with prompts of different lengths (77-token CLIP chunks, then T5's tokens): batched at their
least common multiple only while that repeats the shorter at most 4x (ComfyUI's `CONDCrossAttn.can_concat`),
else each prompt runs in its own call at its own length (a 2-chunk prompt beside an empty negative once made
136530 text tokens)."""

from __future__ import annotations

import pytest
import torch
from diffusers import SD3Transformer2DModel

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import Conditioning, Latents

pytestmark = pytest.mark.slow  # builds the tiny SD3 demo on first use


def _text_lengths(
    monkeypatch: pytest.MonkeyPatch, positive_tokens: int, negative_tokens: int
) -> list[tuple[int, int]]:
    """(batch, text tokens) of every transformer call of a 2-step CFG run of tiny SD3."""
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, "demo:tiny-sd3")
    width = model.denoiser.config["joint_attention_dim"]
    pooled = model.denoiser.config["pooled_projection_dim"]
    gen = torch.Generator().manual_seed(0)

    def cond(tokens: int) -> Conditioning:
        embeds = torch.randn(1, tokens, width, generator=gen)
        return Conditioning(embeds=embeds, pooled=torch.randn(1, pooled, generator=gen), family="sd3")

    seen: list[tuple[int, int]] = []
    forward = SD3Transformer2DModel.forward

    def recorded(self: SD3Transformer2DModel, *args: object, **kwargs: torch.Tensor) -> object:
        seen.append(tuple(kwargs["encoder_hidden_states"].shape[:2]))
        return forward(self, *args, **kwargs)

    # On the class: the manager builds the module when the sampler asks for it.
    monkeypatch.setattr(SD3Transformer2DModel, "forward", recorded)
    latents = Latents(torch.zeros(1, model.vae.latent_channels, 4, 4), model.vae.scale_factor)
    settings = SamplerSettings("euler", steps=2, cfg=4.0, seed=1)
    out = sample(mm, model.denoiser, cond(positive_tokens), cond(negative_tokens), latents, settings)
    assert torch.isfinite(out.samples).all()
    return seen


def test_prompts_far_apart_in_length_run_as_two_calls_at_their_own_lengths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2 CLIP chunks + 256 T5 tokens beside 1 chunk + 256: the LCM (136530) would repeat the negative 410x.
    assert _text_lengths(monkeypatch, 154 + 256, 77 + 256) == [(1, 333), (1, 410)] * 2


def test_prompts_close_in_length_run_as_one_batch_at_their_least_common_multiple(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The negative repeated twice beside the positive, as ComfyUI concatenates them.
    assert _text_lengths(monkeypatch, 154, 77) == [(2, 154)] * 2
