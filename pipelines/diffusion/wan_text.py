"""Wan prompt encoding: the folder's UMT5 encoder, padded to 512 tokens with the padded positions zeroed.

Lives here: `encode_wan`, `umt5_working_bytes`. May import: stdlib, torch, diffusers, memory,
pipelines.diffusion.values / lora / prompt_weights / zimage_text (the folder's text encoder config).

Adapted from diffusers' `WanPipeline._get_t5_prompt_embeds` for one prompt: the text is cleaned as the
pipeline cleans it (`prompt_clean`: ftfy where installed, HTML unescaped, whitespace collapsed), tokenized
with `</s>` and padded/truncated to `max_tokens` (the pipeline's `max_sequence_length`, 512), encoded with the
attention mask, and the positions past the real tokens are set to zero. The transformer cross-attends to all
512 positions without a mask, so the zero rows are part of the conditioning: a conditioning is
(1, max_tokens, hidden), never cut to the real tokens.
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.zimage_text import text_encoder_config


def umt5_working_bytes(config: dict, tokens: int, dtype: torch.dtype) -> int:
    """One prompt's live activations: UMT5 attends eagerly, so the peak is inside a layer's attention, where
    the (heads, tokens, tokens) scores, their softmax and the layer's position bias are alive together beside
    two (tokens, width) states. Measured on UMT5-XXL at 512 tokens (meta device, tests/test_family_wan.py):
    1.08x of the live tensors, at 2 and 24 layers alike (the peak is within one layer)."""
    width = int(config.get("d_model", 4096))
    heads = int(config.get("num_heads", 64))
    elements = 3 * heads * tokens * tokens + 2 * tokens * width
    return elements * torch.finfo(dtype).bits // 8


@torch.no_grad()
def encode_wan(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    working = Working(umt5_working_bytes(text_encoder_config(ref), max_tokens, ref.dtype), f"1x{max_tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        # Tokens inside the use: `app plan` stops at the use, before the pipeline module's seconds of imports.
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        # 1. Tokens, as the pipeline makes them (weighting syntax dropped: T5 takes plain text)
        tokenizer = ref.tokenizers[0].load()
        text = prompt_clean(strip_weights(text))
        inputs = tokenizer(
            text,
            padding="max_length",
            max_length=max_tokens,
            truncation=True,
            add_special_tokens=True,
            return_attention_mask=True,
            return_tensors="pt",
        )
        real = int(inputs.attention_mask.gt(0).sum())

        # 2. The last hidden state at the real tokens, zeros after them
        states = te(inputs.input_ids.to(mm.device), inputs.attention_mask.to(mm.device)).last_hidden_state
        states = states.to(dtype=ref.dtype).cpu()
    embeds = torch.zeros_like(states)
    embeds[:, :real] = states[:, :real]
    return Conditioning(embeds=embeds, family=ref.family.name, text=text)
