"""Working memory of the Qwen-Image 2.1 transformer: one call over the joint sequence plus the KV caches.

Lives here: `qwenimage21_working_bytes`, `qwenimage21_activations`, `joint_tokens`. May import: stdlib,
torch, memory, pipelines.diffusion.values.
"""

from __future__ import annotations

from typing import Any

from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.values import DenoiserRef


def joint_tokens(text_tokens: int, ref_tokens: int, target_tokens: int) -> int:
    """Length of the transformer's joint sequence: the prompt's tokens with each image slot (a quarter of the
    reference tokens) replaced by its 2x2 latents, then the target image's latents."""
    return text_tokens - ref_tokens // 4 + ref_tokens + target_tokens


def qwenimage21_activations(config: dict[str, Any], tokens: int, prefix: int) -> list[Activations]:
    hidden = int(config.get("num_attention_heads", 32)) * int(config.get("attention_head_dim", 128))
    mlp = hidden * int(config.get("mlp_ratio", 3))
    layers = int(config.get("num_layers", 32))
    return [
        Activations("joint stream, residual, modulated input, q, k, v, attention out", 7, hidden, tokens),
        Activations("SwiGLU: proj, gate, product", 3, mlp, tokens),
        Activations("KV cache of the prefix, every block", 2 * layers, hidden, prefix),
    ]


def qwenimage21_working_bytes(
    denoiser: DenoiserRef, h: int, w: int, batch: int, text_tokens: int, ref_tokens: int
) -> int:
    """Bytes of the loop's widest moment on a (batch, C, h, w) latent: the first step's call (the whole joint
    sequence) for one prompt, beside the KV caches of both prompts (true CFG keeps one per prompt)."""
    tokens = joint_tokens(text_tokens, ref_tokens, h * w)
    prefix = tokens - h * w
    terms = qwenimage21_activations(denoiser.config, tokens, prefix)
    large = activation_bytes(terms, batch=batch, dtype=denoiser.dtype)
    cache = activation_bytes(terms[-1:], batch=batch, dtype=denoiser.dtype)
    large += cache  # the other prompt's cache
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`
