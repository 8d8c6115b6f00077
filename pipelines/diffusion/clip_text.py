"""One CLIP text encoder over a weighted, chunked prompt, with CLIP skip.

Lives here: `encode_clip_chunks`, `ClipOutput`, `clip_layer`, `Embeddings`.
May import: torch, safetensors, memory, pipelines.diffusion.values/lora/prompt_weights.

The prompt is parsed (`prompt_weights.parse_weights`), split in 77-token chunks, each chunk encoded on its
own and weighted, and the chunks concatenated along the sequence. `layer` is which hidden state the family
conditions on; `clip_skip` (ComfyUI's CLIPSetLastLayer: -1 last layer, -2 the one before, ...) overrides it:
SD1.x/2.x normalise the chosen layer with CLIP's final layer norm (as diffusers' `clip_skip` and ComfyUI do),
SDXL and SD3 take the raw hidden state (ComfyUI's `layer_norm_hidden_state=False` for them).

Textual inversion: `embedding:name` loads `name.safetensors` from the embeddings folder (`Embeddings`): an
SD1.x file holds one (n, 768) tensor (`emb_params`, or its only tensor); an SDXL/SD3 file holds `clip_l`
(n, 768) and `clip_g` (n, 1280), one per CLIP. The vectors replace the token embeddings at their positions,
through a forward hook on the encoder's input embedding layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import (
    PromptChunk,
    apply_weights,
    chunk_tokens,
    empty_chunk,
    has_weights,
    parse_weights,
)
from pipelines.diffusion.values import TextEncoderRef


class Embeddings:
    """Textual-inversion embeddings in one folder, read on first use (`name.safetensors`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[str, dict[str, torch.Tensor]] = {}

    def vectors(self, name: str, index: int, width: int) -> torch.Tensor:
        """(n, width) vectors of `name` for CLIP number `index` (0: clip_l, 1: clip_g)."""
        from safetensors.torch import load_file

        path = self.folder / f"{name}.safetensors"
        if name not in self._files:
            if not path.is_file():
                raise FileNotFoundError(
                    f"embedding:{name}: no {path.name} in the embeddings folder {self.folder}"
                )
            self._files[name] = load_file(str(path))
        tensors = self._files[name]
        key = ("clip_l", "clip_g")[index] if index < 2 else None
        if key in tensors:
            found = tensors[key]
        elif "emb_params" in tensors:
            found = tensors["emb_params"]
        else:
            fitting = [t for t in tensors.values() if t.ndim == 2 and t.shape[-1] == width]
            if len(fitting) != 1:
                raise ValueError(f"{path.name}: no single (n, {width}) tensor for this text encoder")
            found = fitting[0]
        if found.ndim != 2 or found.shape[-1] != width:
            raise ValueError(
                f"{path.name}: vectors of shape {tuple(found.shape)}, this text encoder needs (n, {width})"
            )
        return found.float()


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
    working: Working | None = None,
    embeddings: Embeddings | None = None,
) -> ClipOutput:
    """Encode `text` with CLIP number `index` of `ref` (weights, chunks, embeddings, the ref's clip_skip)."""
    layer, normalise = clip_layer(default_layer, ref.clip_skip, normalise_skipped=normalise_skipped)
    with use_text_encoder(mm, ref, index, working=working) as text_encoder:
        # Tokens inside the use (the working figure does not depend on them): `app plan` stops at the use,
        # before transformers' tokenizer is imported and built.
        tokenizer = ref.tokenizers[index].load()
        runs = parse_weights(text)
        chunks = chunk_tokens(tokenizer, runs, _lookup(ref, index, embeddings))
        while len(chunks) < min_chunks:  # SDXL: both encoders must give the same number of chunks
            chunks.append(empty_chunk(tokenizer))
        weighted = has_weights(runs)
        use_mask = getattr(text_encoder.config, "use_attention_mask", False)

        def run(chunk: PromptChunk) -> tuple[torch.Tensor, torch.Tensor | None]:
            chunk_ids = chunk.ids
            ids = torch.tensor([chunk_ids], device=mm.device)
            mask = None
            if use_mask:  # real tokens up to and including the first EOS (pad may equal EOS)
                mask = torch.zeros_like(ids)
                mask[0, : chunk_ids.index(tokenizer.eos_token_id, 1) + 1] = 1
            with _vectors_at(text_encoder, chunk):
                z, pooled = _run(text_encoder, ids, layer, normalise, mask)
            return z.to(dtype=ref.dtype), pooled

        z_empty = run(empty_chunk(tokenizer))[0] if weighted and weighting == "comfy" else None
        embeds, first_pooled = [], None
        for i, chunk in enumerate(chunks):
            z, pooled = run(chunk)
            if i == 0:
                first_pooled = pooled
            embeds.append(apply_weights(z, torch.tensor(chunk.weights), weighting, z_empty))
    pooled_out = first_pooled.to(dtype=ref.dtype).cpu() if first_pooled is not None else None
    return ClipOutput(torch.cat(embeds, dim=1).cpu(), pooled_out, len(chunks))


def _lookup(ref: TextEncoderRef, index: int, embeddings: Embeddings | None):
    if embeddings is None:
        return None
    source = ref.tokenizers[index]
    width = _hidden_size(source)
    return lambda name: embeddings.vectors(name, index, width)


def _hidden_size(source) -> int:
    # The encoder's width from its config.json next to the tokenizer (no weights loaded).
    import json

    config = source.path / source.subfolder.replace("tokenizer", "text_encoder") / "config.json"
    return int(json.loads(config.read_text())["hidden_size"])


@contextmanager
def _vectors_at(text_encoder: torch.nn.Module, chunk: PromptChunk) -> Iterator[None]:
    """Write the chunk's embedding vectors over the token embeddings at their positions during the forward."""
    if not chunk.vectors:
        yield
        return

    def hook(_module: torch.nn.Module, _args: object, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        for pos, vector in chunk.vectors:
            out[:, pos] = vector.to(device=out.device, dtype=out.dtype)
        return out

    handle = text_encoder.get_input_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def chunk_count(ref: TextEncoderRef, index: int, text: str, embeddings: Embeddings | None = None) -> int:
    return len(
        chunk_tokens(ref.tokenizers[index].load(), parse_weights(text), _lookup(ref, index, embeddings))
    )
