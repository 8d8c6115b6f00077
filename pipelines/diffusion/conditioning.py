"""Prompt encoding per family: CLIP (SD1.x/2.x), two CLIPs with a pooled vector (SDXL), T5 (PixArt),
two CLIPs + T5 (SD3), CLIP pooled + T5 (Flux), Qwen3 through a chat template (Z-Image, in `zimage_text`),
Qwen2.5-VL through the pipeline's template (Qwen-Image, in `qwenimage_text`).

Lives here: `encode_prompt`, `encode_clip`, `encode_clip_sdxl`, `encode_t5`, `encode_sd3`, `encode_flux`,
`text_encoder_working_bytes`.
May import: torch, memory, pipelines.diffusion.values/families/zimage_text/qwenimage_text/wan_text/ltx2_text/flux2_text/
flux2_dev_text.

Each function mirrors the `encode_prompt` of the matching diffusers pipeline for one prompt (the negative
prompt is just another `TextEncode` node), so a plain prompt's embeddings are the pipeline's bit for bit.
CLIP encoders also take weights, `BREAK` and long prompts in 77-token chunks, and CLIP skip (clip_text.py,
prompt_weights.py); T5 takes the text without weighting syntax. Every text
encoder is used through `mm.use(...)`, so a sequential policy unloads it as soon as the prompt is encoded.
"""

from __future__ import annotations

from pathlib import Path

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.clip_text import ClipOutput, Embeddings, chunk_count, encode_clip_chunks
from pipelines.diffusion.flux2_dev_text import encode_flux2_dev
from pipelines.diffusion.flux2_text import encode_flux2_klein
from pipelines.diffusion.flux3_text import encode_flux3
from pipelines.diffusion.krea2_text import encode_krea2
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.ltx2_text import encode_ltx2
from pipelines.diffusion.prompt_weights import WEIGHTINGS, strip_weights
from pipelines.diffusion.qwenimage21_text import encode_qwenimage21
from pipelines.diffusion.qwenimage_text import encode_qwenimage
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.wan_text import encode_wan
from pipelines.diffusion.working import diffusion_working_bytes
from pipelines.diffusion.zimage_text import encode_zimage

# The prompt encoders a family may declare (`Family.prompt_encoder`); `encode_prompt` dispatches on them.
PROMPT_ENCODERS = (
    "clip",
    "clip_sdxl",
    "t5",
    "sd3",
    "flux",
    "qwen_chat",
    "qwenimage",
    "umt5",
    "qwen_flux2",
    "mistral_flux2",
    "krea2",
    "flux3",
    "gemma_ltx2",
    "minimax",
    "qwenimage21",
)


def text_encoder_working(tokens: int, hidden_size: int, dtype: torch.dtype) -> Working:
    """The formula for one prompt of `tokens` tokens, keyed by that length (the learned peak replaces it)."""
    return Working(text_encoder_working_bytes(tokens, hidden_size, dtype), f"1x{tokens}")


def text_encoder_working_bytes(tokens: int, hidden_size: int, dtype: torch.dtype) -> int:
    return diffusion_working_bytes(
        "text_encoder",
        height=0,
        width=0,
        dtype=dtype,
        guidance=False,
        text_tokens=tokens,
        hidden_size=hidden_size,
    )


def encode_clip(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    weighting: str = "comfy",
    embeddings: Embeddings | None = None,
) -> Conditioning:
    # As diffusers' StableDiffusionPipeline.encode_prompt (one prompt; its clip_skip is our clip_skip - 1),
    # plus weights and 77-token chunks (clip_text.py).
    tokens = ref.tokenizers[0].max_length
    out = encode_clip_chunks(
        mm,
        ref,
        0,
        text,
        weighting=weighting,
        default_layer=None,
        normalise_skipped=True,
        working=text_encoder_working(tokens, 1024, ref.dtype),
        embeddings=embeddings,
    )
    return Conditioning(embeds=out.embeds, family=ref.family.name, text=text)


def _encode_clip_pair(
    mm: MemoryManager, ref: TextEncoderRef, text: str, weighting: str, embeddings: Embeddings | None
) -> list[ClipOutput]:
    """CLIP-L and CLIP-G (SDXL, SD3): both at their penultimate layer, padded to the same chunk count."""
    chunks = max(chunk_count(ref, i, text, embeddings) for i in range(2))
    return [
        encode_clip_chunks(
            mm,
            ref,
            i,
            text,
            weighting=weighting,
            default_layer=-2,
            normalise_skipped=False,
            min_chunks=chunks,
            working=text_encoder_working(77, 1280, ref.dtype),
            embeddings=embeddings,
        )
        for i in range(2)
    ]


def encode_clip_sdxl(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    weighting: str = "comfy",
    embeddings: Embeddings | None = None,
) -> Conditioning:
    # As diffusers' StableDiffusionXLPipeline.encode_prompt (one prompt, prompt_2 = prompt): both encoders'
    # penultimate layers side by side, the pooled vector is text_encoder_2's projected EOS embedding.
    outs = _encode_clip_pair(mm, ref, text, weighting, embeddings)
    prompt_embeds = torch.concat([o.embeds for o in outs], dim=-1)  # (B, 77 * chunks, 768 + 1280)
    pooled = outs[1].pooled
    assert pooled is not None, "SDXL needs a text encoder with projection (text_encoder_2)"
    return Conditioning(embeds=prompt_embeds, pooled=pooled, family=ref.family.name, text=text)


@torch.no_grad()
def encode_t5(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # Adapted from diffusers' PixArtSigmaPipeline.encode_prompt (clean_caption=False: lower-case and strip).
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text).lower().strip()  # T5 takes plain text: weighting syntax is dropped
    text_inputs = tokenizer(
        text,
        padding="max_length",
        max_length=max_tokens,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    attention_mask = text_inputs.attention_mask
    with use_text_encoder(mm, ref, 0, working=text_encoder_working(max_tokens, 4096, ref.dtype)) as te:
        prompt_embeds = te(text_inputs.input_ids.to(mm.device), attention_mask=attention_mask.to(mm.device))[
            0
        ]
        prompt_embeds = prompt_embeds.to(dtype=te.dtype)
    return Conditioning(
        embeds=prompt_embeds.cpu(), attention_mask=attention_mask, family=ref.family.name, text=text
    )


@torch.no_grad()
def encode_sd3(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    *,
    max_tokens: int,
    weighting: str = "comfy",
    embeddings: Embeddings | None = None,
) -> Conditioning:
    # Adapted from diffusers' StableDiffusion3Pipeline.encode_prompt (one prompt, all three encoders).
    outs = _encode_clip_pair(mm, ref, text, weighting, embeddings)
    clip_embeds = [o.embeds for o in outs]
    pooled = [o.pooled for o in outs]  # text_embeds: the projected EOS vectors
    text = strip_weights(text)  # T5 takes plain text: weighting syntax is dropped
    tokenizer_3 = ref.tokenizers[2].load()
    inputs = tokenizer_3(
        text,
        padding="max_length",
        max_length=max_tokens,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    with use_text_encoder(mm, ref, 2, working=text_encoder_working(max_tokens, 4096, ref.dtype)) as t5:
        t5_embeds = t5(inputs.input_ids.to(mm.device))[0].to(dtype=t5.dtype).cpu()
    # CLIP-L and bigG side by side (768 + 1280), zero-padded to T5's width, then T5's tokens after them.
    clip_prompt_embeds = torch.cat(clip_embeds, dim=-1)
    clip_prompt_embeds = torch.nn.functional.pad(
        clip_prompt_embeds, (0, t5_embeds.shape[-1] - clip_prompt_embeds.shape[-1])
    )
    prompt_embeds = torch.cat([clip_prompt_embeds, t5_embeds], dim=-2)  # (B, 77 * chunks + max_tokens, 4096)
    return Conditioning(
        embeds=prompt_embeds, pooled=torch.cat(pooled, dim=-1), family=ref.family.name, text=text
    )


@torch.no_grad()
def encode_flux(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    *,
    max_tokens: int,
    embeddings: Embeddings | None = None,
) -> Conditioning:
    # As diffusers' FluxPipeline._get_clip_prompt_embeds and _get_t5_prompt_embeds (one prompt). Flux takes
    # only CLIP's pooled (EOS) vector of the first chunk, which token weights don't change; T5 gets the text
    # without weighting syntax.
    out = encode_clip_chunks(
        mm,
        ref,
        0,
        text,
        weighting="comfy",
        default_layer=None,
        normalise_skipped=True,
        working=text_encoder_working(77, 768, ref.dtype),
        embeddings=embeddings,
    )
    pooled = out.pooled
    text = strip_weights(text)
    tokenizer_2 = ref.tokenizers[1].load()
    t5_inputs = tokenizer_2(
        text, padding="max_length", max_length=max_tokens, truncation=True, return_tensors="pt"
    )
    with use_text_encoder(mm, ref, 1, working=text_encoder_working(max_tokens, 4096, ref.dtype)) as t5:
        prompt_embeds = t5(t5_inputs.input_ids.to(mm.device), output_hidden_states=False)[0]
        prompt_embeds = prompt_embeds.to(dtype=t5.dtype).cpu()
    return Conditioning(embeds=prompt_embeds, pooled=pooled, family=ref.family.name, text=text)


def encode_prompt(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    *,
    max_tokens: int | None = None,
    weighting: str = "comfy",
    embeddings_dir: Path | None = None,
) -> Conditioning:
    """Encode one prompt with the family's text encoder(s).

    `weighting`: "comfy" or "a1111" (CLIP only). `embeddings_dir`: where `embedding:name` finds
    `name.safetensors` (None: such words stay text).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"field 'weighting': {weighting!r} is not one of {', '.join(WEIGHTINGS)}")
    emb = Embeddings(embeddings_dir) if embeddings_dir is not None else None
    encoder = ref.family.prompt_encoder  # a name in PROMPT_ENCODERS, declared by the family
    if encoder == "clip_sdxl":
        return encode_clip_sdxl(mm, ref, text, weighting, emb)
    if encoder == "t5":
        return encode_t5(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 300)
    if encoder == "sd3":
        tokens = max_tokens or ref.family.max_text_tokens or 256
        return encode_sd3(mm, ref, text, max_tokens=tokens, weighting=weighting, embeddings=emb)
    if encoder == "flux":
        tokens = max_tokens or ref.family.max_text_tokens or 512
        return encode_flux(mm, ref, text, max_tokens=tokens, embeddings=emb)
    if encoder == "qwenimage":
        return encode_qwenimage(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "mistral_flux2":
        return encode_flux2_dev(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "qwen_flux2":
        return encode_flux2_klein(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "qwenimage21":
        return encode_qwenimage21(mm, ref, text)
    if encoder == "flux3":
        return encode_flux3(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 8192)
    if encoder == "krea2":
        return encode_krea2(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "qwen_chat":
        return encode_zimage(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "umt5":
        return encode_wan(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    if encoder == "gemma_ltx2":
        return encode_ltx2(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 1024)
    if encoder == "minimax":  # the prompt verbatim: no padding, no truncation (the pipeline's)
        from pipelines.diffusion.minimax_text import encode_minimax

        return encode_minimax(mm, ref, text)
    return encode_clip(mm, ref, text, weighting, emb)
