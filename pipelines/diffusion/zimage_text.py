"""Z-Image prompt encoding: the folder's Qwen3 read through the folder tokenizer's own chat template.

Lives here: `encode_zimage`, `text_encoder_config`. May import: stdlib, torch, memory,
pipelines.diffusion.values / lora / prompt_weights / working.

Adapted from diffusers' `ZImagePipeline._encode_prompt` for one prompt: the text becomes a one-message chat
(`apply_chat_template(..., add_generation_prompt=True, enable_thinking=True)`, the template the tokenizer
folder ships), is padded to `max_tokens`, and the embeddings are the second-to-last hidden layer at the real
tokens only (the padding is dropped, so a conditioning is (1, real tokens, hidden)). The transformer takes a
list of such variable-length captions, so nothing is padded back.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_working_bytes


def text_encoder_config(ref: TextEncoderRef) -> dict[str, Any]:
    """The text encoder's config.json next to its tokenizer (a diffusers folder); {} when not readable, and
    the working-memory formula then assumes Qwen3-4B's sizes."""
    path = ref.tokenizers[0].path / ref.family.text_encoders[0].subfolder / "config.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


@torch.no_grad()
def encode_zimage(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The chat prompt, exactly as the pipeline builds it (weighting syntax dropped: Qwen takes plain text)
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=True,
    )
    inputs = tokenizer(
        chat, padding="max_length", max_length=max_tokens, truncation=True, return_tensors="pt"
    )
    mask = inputs.attention_mask.bool()  # (1, max_tokens): True at the real tokens

    # 2. The second-to-last hidden layer, at the real tokens only
    working = Working(
        chat_encoder_working_bytes(text_encoder_config(ref), max_tokens, ref.dtype), f"1x{max_tokens}"
    )
    with use_text_encoder(mm, ref, 0, working=working) as te:
        states = te(
            input_ids=inputs.input_ids.to(mm.device),
            attention_mask=mask.to(mm.device),
            output_hidden_states=True,
        ).hidden_states[-2]
        embeds = states[0][mask[0].to(states.device)]  # (real tokens, hidden)
    return Conditioning(embeds=embeds[None].cpu(), family=ref.family.name, text=text)
