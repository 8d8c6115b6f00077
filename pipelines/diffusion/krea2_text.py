"""Krea 2 prompt encoding: Qwen3-VL read through the pipeline's fixed-length template, several hidden layers
stacked per token.

Lives here: `encode_krea2`, `krea2_text_working_bytes`, `select_layers`, `PREFIX`, `SUFFIX`, `PREFIX_TOKENS`,
`SUFFIX_TOKENS`, `DEFAULT_LAYERS`. May import: stdlib, json, torch, memory, pipelines.diffusion.values / lora /
prompt_weights / working / zimage_text.

Adapted from diffusers' `Krea2Pipeline.get_text_hidden_states` for one prompt. The template is Qwen-Image's
system turn; the prompt is padded (or cut) to `max_tokens + 34 - 5` tokens *before* the 5-token assistant
suffix, so the padding sits in the middle, and the positions count real tokens only (a pad takes none), as the
model was trained. The hidden states at the folder's `text_encoder_select_layers` (model_index.json; Krea 2's
twelve by default) are stacked per token, (1, tokens, layers, hidden), the 34 system-turn tokens dropped; the
mask travels with them (the transformer masks the pads as keys).
"""

from __future__ import annotations

import json
from typing import Any

import torch

from memory import MemoryManager, Working
from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_activations
from pipelines.diffusion.zimage_text import text_encoder_config

# Krea2Pipeline.__init__'s template, quoted verbatim: values, not functions, so no `Copied from` marker.
PREFIX = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
PREFIX_TOKENS = 34  # `prompt_template_encode_start_idx`
SUFFIX_TOKENS = 5  # `prompt_template_encode_num_suffix_tokens`
DEFAULT_LAYERS = (2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35)  # the pipeline's taps of Qwen3-VL-4B


def select_layers(ref: TextEncoderRef) -> tuple[int, ...]:
    """The folder's `text_encoder_select_layers` (model_index.json), else the pipeline's default."""
    path = ref.tokenizers[0].path / "model_index.json"
    try:
        layers = json.loads(path.read_text(encoding="utf-8")).get("text_encoder_select_layers")
    except (OSError, ValueError):
        layers = None
    return tuple(int(i) for i in layers) if layers else DEFAULT_LAYERS


def krea2_text_working_bytes(config: dict[str, Any], tokens: int, layers: int, dtype: torch.dtype) -> int:
    """Qwen3-VL's language model over `tokens` (the facts of `chat_encoder_activations`, its `text_config`):
    every layer's hidden state and the KV cache grow through the call, and on top of them either one layer's
    SwiGLU (inside the layers) or, at the end, the stack of `layers` taps, whichever is larger (Qwen3VLModel
    has no LM head, so no logits). Measured on Qwen3-VL-4B's widths at 12 and 36 layers
    (tests/test_family_krea2.py)."""
    text = dict(config.get("text_config") or config)
    terms = chat_encoder_activations(text, tokens)
    growing = [t for t in terms if t.what in ("hidden states of every layer", "KV cache")]
    assert len(growing) == 2, [t.what for t in terms]  # the names `chat_encoder_activations` gives
    layer = [t for t in terms if t not in growing]
    stack = [Activations("stacked taps", layers, int(text.get("hidden_size", 2560)), tokens)]
    large = activation_bytes(growing, batch=1, dtype=dtype)
    large += max(activation_bytes(layer, batch=1, dtype=dtype), activation_bytes(stack, batch=1, dtype=dtype))
    return large + large // 64  # the small tensors beside them, as in `chat_encoder_working_bytes`


@torch.no_grad()
def encode_krea2(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The template, padded in the middle (weighting syntax dropped: Qwen takes plain text)
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    body = tokenizer(
        [PREFIX + text],
        truncation=True,
        padding="max_length",
        max_length=max_tokens + PREFIX_TOKENS - SUFFIX_TOKENS,
        return_tensors="pt",
    )
    suffix = tokenizer([SUFFIX], return_tensors="pt")
    input_ids = torch.cat([body.input_ids, suffix.input_ids], dim=1)
    mask = torch.cat([body.attention_mask, suffix.attention_mask], dim=1).bool()
    # Positions count real tokens only, on the 3 mRoPE axes (equal for text).
    positions = (mask.long().cumsum(dim=-1) - 1).clamp(min=0).unsqueeze(0).expand(3, -1, -1)

    # 2. The chosen hidden layers, stacked per token, without the system turn
    layers = select_layers(ref)
    tokens = input_ids.shape[1]
    config = text_encoder_config(ref)
    working = Working(krea2_text_working_bytes(config, tokens, len(layers), ref.dtype), f"1x{tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        states = te(
            input_ids=input_ids.to(mm.device),
            attention_mask=mask.to(mm.device),
            position_ids=positions.to(mm.device),
            output_hidden_states=True,
        ).hidden_states
        embeds = torch.stack([states[i] for i in layers], dim=2)[:, PREFIX_TOKENS:]  # (1, S, layers, hidden)
    return Conditioning(
        embeds=embeds.cpu(), attention_mask=mask[:, PREFIX_TOKENS:], family=ref.family.name, text=text
    )
