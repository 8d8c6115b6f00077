"""Working memory of the Qwen-Image 2.1 transformer over a denoising loop: the first step's call over the whole
joint sequence, beside the KV caches the loop keeps (one per prompt).

Lives here: `qwenimage21_working_bytes`, `qwenimage21_activations`, `kv_cache_activations`, `joint_tokens`.
May import: stdlib, memory, pipelines.diffusion.values.

The first step runs every token (text, references and the target image) through each single-stream block:
the joint stream, a block's residual, modulated input, q, k, v, attention output and gated output (10 x the
width a token) and its SwiGLU (proj, gate, product: 3 x the MLP width) are alive at its widest moment. That
step also stores the prefix's (text and reference tokens') keys and values of every block, which stay alive
for the loop; under true CFG the negative prompt has its own cache, alive while its first call runs. Later
steps run the target's tokens only, so the first step is the peak. Measured on the full-width transformer on
the meta device over a whole 2-step loop (tests/test_family_qwenimage21_working.py): 1.04-1.07x.
"""

from __future__ import annotations

from typing import Any

from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.values import DenoiserRef


def joint_tokens(text_tokens: int, ref_tokens: int, target_tokens: int) -> int:
    """Length of the transformer's joint sequence: the prompt's tokens with each image slot (a quarter of the
    reference tokens) replaced by its 2x2 latents, then the target image's latents."""
    return text_tokens - ref_tokens // 4 + ref_tokens + target_tokens


def _width(config: dict[str, Any]) -> int:
    return int(config.get("num_attention_heads", 32)) * int(config.get("attention_head_dim", 128))


def qwenimage21_activations(config: dict[str, Any], tokens: int) -> list[Activations]:
    hidden = _width(config)
    mlp = hidden * int(config.get("mlp_ratio", 3))
    return [
        Activations(
            "joint stream; residual, modulated input, q, k, v, attention and gated outputs",
            10,
            hidden,
            tokens,
        ),
        Activations("SwiGLU: proj, gate, product", 3, mlp, tokens),
    ]


def kv_cache_activations(config: dict[str, Any], prefix: int) -> list[Activations]:
    """The prefix's keys and values of every block (`QwenImage21KVCache`)."""
    return [
        Activations(
            "KV cache of the prefix, every block",
            2 * int(config.get("num_layers", 32)),
            _width(config),
            prefix,
        )
    ]


def qwenimage21_working_bytes(
    denoiser: DenoiserRef, h: int, w: int, batch: int, text_tokens: int, ref_tokens: int, prompts: int = 1
) -> int:
    """Bytes of the loop's widest moment on a (batch, C, h, w) latent with a `text_tokens` prompt (its image
    slots included) and `ref_tokens` reference latents: one first-step call beside `prompts` KV caches."""
    config = denoiser.config
    tokens = joint_tokens(text_tokens, ref_tokens, h * w)
    call = activation_bytes(qwenimage21_activations(config, tokens), batch=batch, dtype=denoiser.dtype)
    cache = activation_bytes(kv_cache_activations(config, tokens - h * w), batch=batch, dtype=denoiser.dtype)
    large = call + prompts * cache
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`
