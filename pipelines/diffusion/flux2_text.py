"""FLUX.2 [klein] prompt encoding: the folder's Qwen3 read through the folder tokenizer's chat template.

Lives here: `encode_flux2_klein`, `KLEIN_TEXT_LAYERS`. May import: stdlib, torch, memory,
pipelines.diffusion.values / lora / prompt_weights / working / zimage_text.

Adapted from diffusers' `Flux2KleinPipeline._get_qwen3_prompt_embeds` for one prompt. What differs from
Z-Image's encoder (zimage_text.py): the chat is rendered with `enable_thinking=False`; the embeddings are
three hidden layers (9, 18, 27: the pipeline's `text_encoder_out_layers` default) stacked per token into
3 x hidden features; and the padding to `max_tokens` is kept (the transformer takes all 512 positions with
no mask, so a conditioning is (1, max_tokens, 3 x hidden) whatever the prompt's length).
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_working_bytes
from pipelines.diffusion.zimage_text import text_encoder_config

# Flux2KleinPipeline.__call__'s `text_encoder_out_layers` default: hidden_states indices (0 = embeddings).
KLEIN_TEXT_LAYERS = (9, 18, 27)


@torch.no_grad()
def encode_flux2_klein(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The chat prompt, exactly as the pipeline builds it (weighting syntax dropped: Qwen takes plain text)
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    inputs = tokenizer(
        chat, padding="max_length", max_length=max_tokens, truncation=True, return_tensors="pt"
    )
    config = text_encoder_config(ref)
    layers = int(config.get("num_hidden_layers", max(KLEIN_TEXT_LAYERS)))
    if layers < max(KLEIN_TEXT_LAYERS):
        raise ValueError(
            f"{ref.family.title}'s text encoder has {layers} layers; the pipeline reads hidden layers "
            f"{', '.join(map(str, KLEIN_TEXT_LAYERS))}"
        )

    # 2. Three hidden layers, stacked per token. The pipeline passes use_cache=False; the working formula
    # still counts a KV cache (an over-estimate by that much, never an under-estimate).
    working = Working(chat_encoder_working_bytes(config, max_tokens, ref.dtype), f"1x{max_tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        output = te(
            input_ids=inputs.input_ids.to(mm.device),
            attention_mask=inputs.attention_mask.to(mm.device),
            output_hidden_states=True,
            use_cache=False,
        )
        out = torch.stack([output.hidden_states[k] for k in KLEIN_TEXT_LAYERS], dim=1)  # (1, 3, S, H)
        batch, layers_n, seq, hidden = out.shape
        embeds = out.permute(0, 2, 1, 3).reshape(batch, seq, layers_n * hidden)
    return Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)
