"""LTX-2 prompt encoding: the folder's Gemma 3 (every hidden state stacked), then the text connectors.

Lives here: `encode_ltx2`, `gemma_stack_working_bytes`. May import: stdlib, torch, memory,
pipelines.diffusion.values / lora / prompt_weights / working / zimage_text (the text encoder config).

Adapted from diffusers' `LTX2Pipeline._get_gemma_prompt_embeds` and the connectors call in `__call__`, for one
prompt: the text is stripped, tokenized left-padded (the pipeline sets `padding_side = "left"`, and the
eos token as pad where there is none) to `max_tokens` (its `max_sequence_length`, 1024) with truncation;
Gemma runs with the attention mask and `output_hidden_states=True` (and logits at the last position only,
which the pipeline does not limit); all hidden states (embeddings + each
layer) are stacked on a last axis and flattened per token; the connectors turn them and the mask into the
video stream's and the audio stream's text tokens and their mask. The pipeline runs the connectors on the
[negative, positive] batch together; they work per prompt, so one prompt at a time is the same math.
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_working_bytes
from pipelines.diffusion.zimage_text import text_encoder_config


def gemma_stack_working_bytes(config: dict, tokens: int, dtype: torch.dtype) -> int:
    """One prompt's live activations: the chat-LLM formula (every layer's hidden state, the KV cache, one
    layer's MLP), measured within 1.3% of Gemma 3 12B's live tensors at 2 to 48 layers and 1024 tokens
    (tests/test_family_ltx2_working.py). It holds because the logits are asked for at the last position only: the
    pipeline's call makes (1024, 262k) of them, 1 GiB in float32 that nothing reads."""
    return chat_encoder_working_bytes(config.get("text_config", config), tokens, dtype)


@torch.no_grad()
def encode_ltx2(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    config = text_encoder_config(ref)
    working = Working(gemma_stack_working_bytes(config, max_tokens, ref.dtype), f"1x{max_tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        # Tokens inside the use (the working figure needs only max_tokens): `app plan` stops at the use,
        # before transformers' tokenizer is imported and built.
        # 1. Tokens, left-padded as the pipeline makes them (weighting syntax dropped: Gemma takes plain text)
        tokenizer = ref.tokenizers[0].load()
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        text = strip_weights(text).strip()
        inputs = tokenizer(
            text,
            padding="max_length",
            max_length=max_tokens,
            truncation=True,
            add_special_tokens=True,
            return_tensors="pt",
        )
        ids, mask = inputs.input_ids.to(mm.device), inputs.attention_mask.to(mm.device)

        # 2. Every hidden state of Gemma, stacked per token: (1, tokens, hidden x (layers + 1))
        # logits_to_keep=1: the same hidden states without the unused (tokens, vocabulary) logits
        states = te(
            input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1
        ).hidden_states
        stacked = torch.stack(states, dim=-1).flatten(2, 3).to(dtype=ref.dtype)

    # 3. The connectors: the video and audio streams' text tokens
    with use_text_encoder(mm, ref, 1) as connectors:
        video, audio, connector_mask = connectors(stacked, mask, padding_side="left")
    return Conditioning(
        embeds=video.cpu(),
        family=ref.family.name,
        attention_mask=connector_mask.cpu(),
        text=text,
        audio_embeds=audio.cpu(),
    )
