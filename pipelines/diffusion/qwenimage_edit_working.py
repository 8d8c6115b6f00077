"""Working memory of Qwen-Image-Edit's prompt encoding: Qwen2.5-VL's vision tower over the pictures' patches,
then its language model over the text and the pictures' merged tokens.

Lives here: `vision_activations`, `vision_working_bytes`, `edit_text_working_bytes`. May import: stdlib,
torch, memory, pipelines.diffusion.qwenimage_text.

The vision tower (32 blocks of 1280 at full size) runs first, over every patch: its peak is inside one
block's SwiGLU (the residual beside the gate, up, activation and product, 4 x intermediate), plus the rotary
tables (cos/sin, before and after the window permutation) that stay alive for the whole tower. Its output
(one 3584-wide token per 2x2 patches) then stays alive through the language model, whose own peak is
`qwenimage_text_working_bytes` over all tokens. Measured on the meta device at full width
(tests/test_family_qwenimage_edit.py).
"""

from __future__ import annotations

from typing import Any

import torch

from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.qwenimage_text import qwenimage_text_working_bytes


def vision_activations(vision: dict[str, Any], patches: int) -> list[Activations]:
    hidden = int(vision.get("hidden_size", 1280))
    head_dim = hidden // int(vision.get("num_heads", 16))
    return [
        Activations("vision residual", 1, hidden, patches),
        Activations(
            "vision SwiGLU: gate, up, activation, product",
            4,
            int(vision.get("intermediate_size", 3420)),
            patches,
        ),
        Activations("vision rotary cos/sin, before and after the window permutation", 6, head_dim, patches),
    ]


def vision_working_bytes(vision: dict[str, Any], patches: int, dtype: torch.dtype) -> int:
    """The vision tower's peak over `patches` 14 px patches (all pictures of one prompt together)."""
    large = activation_bytes(vision_activations(vision, patches), batch=1, dtype=dtype)
    return large + large // 64  # the small tensors beside them (window indices, cu_seqlens), as elsewhere


def edit_text_working_bytes(config: dict[str, Any], tokens: int, patches: int, dtype: torch.dtype) -> int:
    """One edit prompt: `tokens` text-and-picture tokens, `patches` vision patches. The tower's peak and the
    language model's come one after the other; the tower's output (patches / merge**2 tokens of the
    language model's width) is alive across both."""
    vision = dict(config.get("vision_config") or {})
    merge = int(vision.get("spatial_merge_size", 2))
    width = int(vision.get("out_hidden_size", 3584))
    merged = activation_bytes(
        [Activations("picture tokens", 1, width, patches // merge**2)], batch=1, dtype=dtype
    )
    text = qwenimage_text_working_bytes(config, tokens, dtype)
    return merged + max(vision_working_bytes(vision, patches, dtype), text)
