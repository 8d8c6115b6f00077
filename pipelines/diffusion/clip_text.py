"""One CLIP text encoder over a weighted, chunked prompt, with CLIP skip.

Lives here: `encode_clip_chunks`, `ClipOutput`, `clip_layer`.
May import: torch, memory, pipelines.diffusion.values/lora/prompt_weights.

The prompt is parsed (`prompt_weights.parse_weights`), split in 77-token chunks, each chunk encoded on its
own and weighted, and the chunks concatenated along the sequence. `layer` is which hidden state the family
conditions on; `clip_skip` (ComfyUI's CLIPSetLastLayer: -1 last layer, -2 the one before, ...) overrides it:
SD1.x/2.x normalise the chosen layer with CLIP's final layer norm (as diffusers' `clip_skip` and ComfyUI do),
SDXL and SD3 take the raw hidden state (ComfyUI's `layer_norm_hidden_state=False` for them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memory import MemoryManager
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import (
    apply_weights,
    chunk_tokens,
    empty_chunk,
    has_weights,
    parse_weights,
)
from pipelines.diffusion.values import TextEncoderRef


@dataclass(frozen=True)
class ClipOutput:
    embeds: torch.Tensor  # (1, 77 * chunks, D)
    pooled: torch.Tensor | None  # (1, P): the first chunk's projected (or pooled) EOS vector
    chunks: int


def clip_layer(
    default: int | None, clip_skip: int | None, *, normalise_skipped: bool
) -> tuple[int | None, bool]:
    """(hidden-state index or None for the final output, apply the final layer norm) for one encoder."""
    if clip_skip is None:
        return default, False
    if clip_skip == -1 and normalise_skipped:
        return None, False  # SD1.x's last layer: the model's own output, final layer norm included
    return clip_skip, normalise_skipped


def _final_norm(text_encoder: torch.nn.Module) -> torch.nn.Module:
    # transformers 5 builds CLIPTextModel without the `text_model` level; older layouts and
    # CLIPTextModelWithProjection keep it.
    inner = getattr(text_encoder, "text_model", text_encoder)
    return inner.final_layer_norm


def _run(
    text_encoder: torch.nn.Module,
    ids: torch.Tensor,
    layer: int | None,
    normalise: bool,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    out = text_encoder(ids, attention_mask=mask, output_hidden_states=layer is not None)
    if layer is None:
        z = out.last_hidden_state
    else:
        z = out.hidden_states[layer]
        if normalise:
            z = _final_norm(text_encoder)(z)
    pooled = getattr(out, "text_embeds", None)
    if pooled is None:
        pooled = getattr(out, "pooler_output", None)
    return z, pooled


@torch.no_grad()
def encode_clip_chunks(
    mm: MemoryManager,
    ref: TextEncoderRef,
    index: int,
    text: str,
    *,
    weighting: str,
    default_layer: int | None,
    normalise_skipped: bool,
    min_chunks: int = 1,
    working_bytes: int = 0,
) -> ClipOutput:
    """Encode `text` with CLIP number `index` of `ref` (weights, chunks, the ref's clip_skip)."""
    tokenizer = ref.tokenizers[index].load()
    runs = parse_weights(text)
    chunks = chunk_tokens(tokenizer, runs)
    while len(chunks) < min_chunks:  # SDXL: both encoders must give the same number of chunks
        chunks.append(empty_chunk(tokenizer))
    layer, normalise = clip_layer(default_layer, ref.clip_skip, normalise_skipped=normalise_skipped)
    weighted = has_weights(runs)
    with use_text_encoder(mm, ref, index, working_bytes=working_bytes) as text_encoder:
        use_mask = getattr(text_encoder.config, "use_attention_mask", False)

        def run(chunk_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
            ids = torch.tensor([chunk_ids], device=mm.device)
            mask = None
            if use_mask:  # real tokens up to and including the first EOS (pad may equal EOS)
                mask = torch.zeros_like(ids)
                mask[0, : chunk_ids.index(tokenizer.eos_token_id, 1) + 1] = 1
            z, pooled = _run(text_encoder, ids, layer, normalise, mask)
            return z.to(dtype=ref.dtype), pooled

        z_empty = run(empty_chunk(tokenizer).ids)[0] if weighted and weighting == "comfy" else None
        embeds, first_pooled = [], None
        for i, chunk in enumerate(chunks):
            z, pooled = run(chunk.ids)
            if i == 0:
                first_pooled = pooled
            embeds.append(apply_weights(z, torch.tensor(chunk.weights), weighting, z_empty))
    pooled_out = first_pooled.to(dtype=ref.dtype).cpu() if first_pooled is not None else None
    return ClipOutput(torch.cat(embeds, dim=1).cpu(), pooled_out, len(chunks))


def chunk_count(ref: TextEncoderRef, index: int, text: str) -> int:
    return len(chunk_tokens(ref.tokenizers[index].load(), parse_weights(text)))
