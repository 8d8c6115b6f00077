"""Qwen-Image prompt encoding: the folder's Qwen2.5-VL read through the pipeline's own prompt template.

Lives here: `encode_qwenimage`, `qwenimage_text_working_bytes`, `PROMPT_TEMPLATE`, `TEMPLATE_START`,
`TOKENIZER_MAX_LENGTH`. May import: stdlib, torch, memory, pipelines.diffusion.values / lora /
prompt_weights / working / zimage_text.

Adapted from diffusers' `QwenImagePipeline._get_qwen_prompt_embeds` for one prompt. Unlike Z-Image, the
template is not the tokenizer's chat template: the pipeline formats a fixed system-plus-user text (kept here
verbatim, as the checkpoint was trained with it) and tokenizes it with the folder's tokenizer, unpadded. The
embeddings are the last hidden layer with the template's first 34 tokens (the system turn) dropped, cut to
`max_tokens` (the pipeline's `max_sequence_length`). One prompt is never padded, so no mask travels with it.
"""

from __future__ import annotations

from typing import Any

import torch

from memory import MemoryManager, Working
from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_activations
from pipelines.diffusion.zimage_text import text_encoder_config

# The prompt template QwenImagePipeline.__init__ sets (diffusers.pipelines.qwenimage.pipeline_qwenimage),
# quoted verbatim: a value, not a function, so no `Copied from` marker for the checker.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
TEMPLATE_START = 34  # `prompt_template_encode_start_idx`: the system turn's tokens in Qwen's tokenizer
TOKENIZER_MAX_LENGTH = 1024  # `tokenizer_max_length`: the prompt is truncated to this plus the 34


def qwenimage_text_working_bytes(config: dict[str, Any], tokens: int, dtype: torch.dtype) -> int:
    """Qwen2.5-VL's language model over `tokens` (its `text_config`; the facts of `chat_encoder_activations`):
    every layer's hidden state and the KV cache grow through the call, and on top of them either one
    layer's SwiGLU (inside the layers) or, at the end, the logits `Qwen2_5_VLForConditionalGeneration`
    computes at every position (tokens x vocabulary), whichever is larger; the call does not skip them.
    Measured on Qwen2.5-VL-7B's widths at 4 and 28 layers (tests/test_family_qwenimage.py)."""
    text = dict(config.get("text_config") or config)
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 152064)
    growing, layer = _split_chat_terms(chat_encoder_activations(text, tokens))
    logits = [Activations("logits at every position", 1, vocab, tokens)]
    large = activation_bytes(growing, batch=1, dtype=dtype)
    large += max(
        activation_bytes(layer, batch=1, dtype=dtype), activation_bytes(logits, batch=1, dtype=dtype)
    )
    return large + large // 64  # the small tensors beside them, as in `chat_encoder_working_bytes`


def _split_chat_terms(terms: list[Activations]) -> tuple[list[Activations], list[Activations]]:
    """(what grows through the call: hidden states, KV cache; one layer's widest moment)."""
    growing = [t for t in terms if t.what in ("hidden states of every layer", "KV cache")]
    assert len(growing) == 2, [t.what for t in terms]  # the names `chat_encoder_activations` gives
    return growing, [t for t in terms if t not in growing]


@torch.no_grad()
def encode_qwenimage(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The pipeline's template around the prompt (weighting syntax dropped: Qwen takes plain text)
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    inputs = tokenizer(
        PROMPT_TEMPLATE.format(text),
        max_length=TOKENIZER_MAX_LENGTH + TEMPLATE_START,
        truncation=True,
        return_tensors="pt",
    )
    tokens = inputs.input_ids.shape[1]

    # 2. The last hidden layer, without the system turn, cut to max_tokens
    config = text_encoder_config(ref)
    working = Working(qwenimage_text_working_bytes(config, tokens, ref.dtype), f"1x{tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        states = te(
            input_ids=inputs.input_ids.to(mm.device),
            attention_mask=inputs.attention_mask.to(mm.device),
            output_hidden_states=True,
        ).hidden_states[-1]
        embeds = states[:, TEMPLATE_START:][:, :max_tokens]  # (1, prompt tokens, hidden)
    return Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)
