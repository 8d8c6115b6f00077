"""FLUX.2 [dev] prompt encoding: the folder's Mistral3 read through its chat template with the system prompt.

Lives here: `encode_flux2_dev`, `DEV_TEXT_LAYERS`. May import: stdlib, torch, diffusers, memory,
pipelines.diffusion.values / lora / prompt_weights / working / zimage_text.

Adapted from diffusers' `Flux2Pipeline._get_mistral_3_small_prompt_embeds` for one prompt: a two-message chat
(the pipeline's `SYSTEM_MESSAGE`, then the prompt with any `[IMG]` removed, both as text parts), rendered by
the tokenizer's chat template without a generation prompt and padded to `max_tokens`; the embeddings are
hidden layers 10, 20 and 30 stacked per token into 3 x hidden features, padding kept (as in Klein,
flux2_text.py). The pipeline calls this through its `AutoProcessor`; the chat template and tokenizer are the
processor's tokenizer's, which `AutoTokenizer` reads from the same folder.
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_working_bytes
from pipelines.diffusion.zimage_text import text_encoder_config

# Flux2Pipeline.__call__'s `text_encoder_out_layers` default: hidden_states indices (0 = embeddings).
DEV_TEXT_LAYERS = (10, 20, 30)


@torch.no_grad()
def encode_flux2_dev(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # 1. The chat, exactly as the pipeline's `format_input` builds it (diffusers' pipelines package is
    # imported here, not with this module: every prompt encoder imports this module, `app plan` included)
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    messages = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM_MESSAGE}]},
        {"role": "user", "content": [{"type": "text", "text": text.replace("[IMG]", "")}]},
    ]
    inputs = tokenizer.apply_chat_template(
        [messages],
        add_generation_prompt=False,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        padding="max_length",
        truncation=True,
        max_length=max_tokens,
    )
    config = text_encoder_config(ref)
    config = dict(config.get("text_config") or config)  # Mistral3 nests the language model's sizes
    layers = int(config.get("num_hidden_layers", max(DEV_TEXT_LAYERS)))
    if layers < max(DEV_TEXT_LAYERS):
        raise ValueError(
            f"{ref.family.title}'s text encoder has {layers} layers; the pipeline reads hidden layers "
            f"{', '.join(map(str, DEV_TEXT_LAYERS))}"
        )

    # 2. Three hidden layers, stacked per token (the working formula counts a KV cache the call does not
    # keep: an over-estimate by that much)
    working = Working(chat_encoder_working_bytes(config, max_tokens, ref.dtype), f"1x{max_tokens}")
    with use_text_encoder(mm, ref, 0, working=working) as te:
        output = te(
            input_ids=inputs["input_ids"].to(mm.device),
            attention_mask=inputs["attention_mask"].to(mm.device),
            output_hidden_states=True,
            use_cache=False,
        )
        out = torch.stack([output.hidden_states[k] for k in DEV_TEXT_LAYERS], dim=1)  # (1, 3, S, H)
        batch, layers_n, seq, hidden = out.shape
        embeds = out.permute(0, 2, 1, 3).reshape(batch, seq, layers_n * hidden)
    return Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)
