"""FLUX.3 prompt encoding: the folder's Qwen3-VL read through the folder tokenizer's chat template.

Lives here: `encode_flux3`, `flux3_window`, `flux3_text_working_bytes`, `FLUX3_TEXT_LAYERS`, `PAD_MULTIPLE`.
May import: stdlib, torch, memory, pipelines.diffusion.values / lora / prompt_weights / krea2_text / zimage_text.

Adapted from diffusers' `Flux3TextEncoderStep._get_qwen3_vl_prompt_embeds` (modular_pipelines/flux3) for one
prompt: the user turn through the chat template (generation prompt added), right-padded to a multiple of 80
tokens (capped at `max_tokens`); the padding is masked inside Qwen3-VL, and its position ids are 1 (the
training environment's, which the pipeline passes explicitly); hidden layers 4, 8, ..., 32 are stacked per token
into 8 x hidden features. The transformer attends to the padding too, so the window's length is part of the
conditioning and no mask travels with it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from memory import MemoryManager, Working
from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.krea2_text import krea2_text_working_bytes
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.zimage_text import text_encoder_config

# Flux3TextEncoderStep's `text_encoder_out_layers` default: hidden_states indices (0 = embeddings).
FLUX3_TEXT_LAYERS = (4, 8, 12, 16, 20, 24, 28, 32)
PAD_MULTIPLE = 80  # Flux3TextEncoderStep's `pad_multiple`


def flux3_window(real_tokens: int, max_tokens: int) -> int:
    """The prompt window: its length rounded up to the pad multiple, at most `max_tokens`."""
    return min(math.ceil(real_tokens / PAD_MULTIPLE) * PAD_MULTIPLE, max_tokens)


def flux3_text_working_bytes(config: dict[str, Any], tokens: int, dtype: torch.dtype) -> int:
    """Qwen3-VL's language model over the window (Krea 2's formula with 8 taps: every hidden state, a KV cache
    the call does not keep, so an over-estimate by it, the widest layer or the stack) plus the LM head's logits
    at every position (`Qwen3VLForConditionalGeneration` computes them). Not measured against live tensors."""
    text = dict(config.get("text_config") or config)
    logits = Activations("logits", 1, int(text.get("vocab_size", 151936)), tokens)
    return krea2_text_working_bytes(config, tokens, len(FLUX3_TEXT_LAYERS), dtype) + activation_bytes(
        [logits], batch=1, dtype=dtype
    )


@torch.no_grad()
def encode_flux3(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The chat prompt, exactly as the pipeline builds it (weighting syntax dropped: Qwen takes plain text)
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    real = tokenizer(chat, return_tensors="pt", truncation=True, max_length=max_tokens).input_ids.shape[1]
    window = flux3_window(real, max_tokens)
    inputs = tokenizer(
        chat,
        return_tensors="pt",
        padding="max_length",
        padding_side="right",
        truncation=True,
        max_length=window,
    )
    config = text_encoder_config(ref)
    layers = int(dict(config.get("text_config") or config).get("num_hidden_layers", max(FLUX3_TEXT_LAYERS)))
    if layers < max(FLUX3_TEXT_LAYERS):
        raise ValueError(
            f"{ref.family.title}'s text encoder has {layers} layers; the pipeline reads hidden layers "
            f"{', '.join(map(str, FLUX3_TEXT_LAYERS))}"
        )
    mask = inputs.attention_mask
    positions = torch.arange(window)[None].masked_fill(mask == 0, 1)

    # 2. Eight hidden layers, stacked per token
    working = Working(flux3_text_working_bytes(config, window, ref.dtype), f"1x{window}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        output = te(
            input_ids=inputs.input_ids.to(mm.device),
            attention_mask=mask.to(mm.device),
            position_ids=positions.to(mm.device),
            output_hidden_states=True,
            use_cache=False,
        )
        out = torch.stack([output.hidden_states[k] for k in FLUX3_TEXT_LAYERS], dim=1)  # (1, 8, S, H)
        batch, taps, seq, hidden = out.shape
        embeds = out.permute(0, 2, 1, 3).reshape(batch, seq, taps * hidden)
    return Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)
