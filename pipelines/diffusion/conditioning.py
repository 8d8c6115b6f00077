"""Prompt encoding per family: CLIP (SD1.x/2.x), two CLIPs with a pooled vector (SDXL), T5 (PixArt),
two CLIPs + T5 (SD3), CLIP pooled + T5 (Flux).

Lives here: `encode_prompt`, `encode_clip`, `encode_clip_sdxl`, `encode_t5`, `encode_sd3`, `encode_flux`,
`text_encoder_working_bytes`.
May import: torch, memory, pipelines.diffusion.values/families.

Each function mirrors the `encode_prompt` of the matching diffusers pipeline for one prompt (the negative
prompt is just another `TextEncode` node), so the embeddings are the pipeline's bit for bit. Every text
encoder is used through `mm.use(...)`, so a sequential policy unloads it as soon as the prompt is encoded.
"""

from __future__ import annotations

import torch

from memory import MemoryManager, diffusion_working_bytes
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.values import Conditioning, TextEncoderRef


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


@torch.no_grad()
def encode_clip(mm: MemoryManager, ref: TextEncoderRef, text: str) -> Conditioning:
    # Copied from diffusers' StableDiffusionPipeline.encode_prompt (one prompt, no LoRA/clip_skip).
    tokenizer = ref.tokenizers[0].load()
    text_inputs = tokenizer(
        text,
        padding="max_length",
        max_length=tokenizer.model_max_length,
        truncation=True,
        return_tensors="pt",
    )
    with use_text_encoder(
        mm, ref, 0, working_bytes=text_encoder_working_bytes(tokenizer.model_max_length, 1024, ref.dtype)
    ) as text_encoder:
        attention_mask = None
        if getattr(text_encoder.config, "use_attention_mask", False):
            attention_mask = text_inputs.attention_mask.to(mm.device)
        prompt_embeds = text_encoder(text_inputs.input_ids.to(mm.device), attention_mask=attention_mask)[0]
        prompt_embeds = prompt_embeds.to(dtype=text_encoder.dtype)
    return Conditioning(embeds=prompt_embeds.cpu(), family=ref.family.name, text=text)


@torch.no_grad()
def encode_clip_sdxl(mm: MemoryManager, ref: TextEncoderRef, text: str) -> Conditioning:
    # Copied from diffusers' StableDiffusionXLPipeline.encode_prompt (one prompt, prompt_2 = prompt).
    prompt_embeds_list = []
    pooled_prompt_embeds = None
    for index, source in enumerate(ref.tokenizers):
        tokenizer = source.load()
        text_inputs = tokenizer(
            text,
            padding="max_length",
            max_length=tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        with use_text_encoder(
            mm,
            ref,
            index,
            working_bytes=text_encoder_working_bytes(tokenizer.model_max_length, 1280, ref.dtype),
        ) as text_encoder:
            output = text_encoder(text_inputs.input_ids.to(mm.device), output_hidden_states=True)
            # The pooled vector is text_encoder_2's projected EOS embedding (the only 2-D first output).
            if pooled_prompt_embeds is None and output[0].ndim == 2:
                pooled_prompt_embeds = output[0].to(dtype=text_encoder.dtype).cpu()
            # SDXL conditions on the penultimate layer of both encoders.
            prompt_embeds_list.append(output.hidden_states[-2].to(dtype=ref.dtype).cpu())
    prompt_embeds = torch.concat(prompt_embeds_list, dim=-1)  # (B, 77, 768 + 1280)
    assert pooled_prompt_embeds is not None, "SDXL needs a text encoder with projection (text_encoder_2)"
    return Conditioning(embeds=prompt_embeds, pooled=pooled_prompt_embeds, family=ref.family.name, text=text)


@torch.no_grad()
def encode_t5(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # Copied from diffusers' PixArtSigmaPipeline.encode_prompt (clean_caption=False: lower-case and strip).
    tokenizer = ref.tokenizers[0].load()
    text = text.lower().strip()
    text_inputs = tokenizer(
        text,
        padding="max_length",
        max_length=max_tokens,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    attention_mask = text_inputs.attention_mask
    with use_text_encoder(
        mm, ref, 0, working_bytes=text_encoder_working_bytes(max_tokens, 4096, ref.dtype)
    ) as te:
        prompt_embeds = te(text_inputs.input_ids.to(mm.device), attention_mask=attention_mask.to(mm.device))[
            0
        ]
        prompt_embeds = prompt_embeds.to(dtype=te.dtype)
    return Conditioning(
        embeds=prompt_embeds.cpu(), attention_mask=attention_mask, family=ref.family.name, text=text
    )


@torch.no_grad()
def encode_sd3(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # Copied from diffusers' StableDiffusion3Pipeline.encode_prompt (one prompt, all three encoders).
    clip_embeds, pooled = [], []
    for index, source in enumerate(ref.tokenizers[:2]):
        tokenizer = source.load()
        inputs = tokenizer(
            text,
            padding="max_length",
            max_length=tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        with use_text_encoder(
            mm,
            ref,
            index,
            working_bytes=text_encoder_working_bytes(tokenizer.model_max_length, 1280, ref.dtype),
        ) as clip:
            output = clip(inputs.input_ids.to(mm.device), output_hidden_states=True)
            pooled.append(output[0].cpu())  # text_embeds: the projected EOS vector
            clip_embeds.append(output.hidden_states[-2].to(dtype=ref.dtype).cpu())
    tokenizer_3 = ref.tokenizers[2].load()
    inputs = tokenizer_3(
        text,
        padding="max_length",
        max_length=max_tokens,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    with use_text_encoder(
        mm, ref, 2, working_bytes=text_encoder_working_bytes(max_tokens, 4096, ref.dtype)
    ) as t5:
        t5_embeds = t5(inputs.input_ids.to(mm.device))[0].to(dtype=t5.dtype).cpu()
    # CLIP-L and bigG side by side (768 + 1280), zero-padded to T5's width, then T5's tokens after them.
    clip_prompt_embeds = torch.cat(clip_embeds, dim=-1)
    clip_prompt_embeds = torch.nn.functional.pad(
        clip_prompt_embeds, (0, t5_embeds.shape[-1] - clip_prompt_embeds.shape[-1])
    )
    prompt_embeds = torch.cat([clip_prompt_embeds, t5_embeds], dim=-2)  # (B, 77 + max_tokens, 4096)
    return Conditioning(
        embeds=prompt_embeds, pooled=torch.cat(pooled, dim=-1), family=ref.family.name, text=text
    )


@torch.no_grad()
def encode_flux(mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int) -> Conditioning:
    # Copied from diffusers' FluxPipeline._get_clip_prompt_embeds and _get_t5_prompt_embeds (one prompt).
    tokenizer = ref.tokenizers[0].load()
    clip_inputs = tokenizer(
        text,
        padding="max_length",
        max_length=tokenizer.model_max_length,
        truncation=True,
        return_tensors="pt",
    )
    with use_text_encoder(
        mm, ref, 0, working_bytes=text_encoder_working_bytes(tokenizer.model_max_length, 768, ref.dtype)
    ) as clip:
        # Flux takes only CLIP's pooled (EOS) vector, through its `pooled_projections`.
        pooled = clip(clip_inputs.input_ids.to(mm.device), output_hidden_states=False).pooler_output
        pooled = pooled.to(dtype=clip.dtype).cpu()
    tokenizer_2 = ref.tokenizers[1].load()
    t5_inputs = tokenizer_2(
        text, padding="max_length", max_length=max_tokens, truncation=True, return_tensors="pt"
    )
    with use_text_encoder(
        mm, ref, 1, working_bytes=text_encoder_working_bytes(max_tokens, 4096, ref.dtype)
    ) as t5:
        prompt_embeds = t5(t5_inputs.input_ids.to(mm.device), output_hidden_states=False)[0]
        prompt_embeds = prompt_embeds.to(dtype=t5.dtype).cpu()
    return Conditioning(embeds=prompt_embeds, pooled=pooled, family=ref.family.name, text=text)


def encode_prompt(
    mm: MemoryManager, ref: TextEncoderRef, text: str, *, max_tokens: int | None = None
) -> Conditioning:
    """Encode one prompt with the family's text encoder(s)."""
    if ref.family.name == "sdxl":
        return encode_clip_sdxl(mm, ref, text)
    if ref.family.name == "pixart_sigma":
        return encode_t5(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 300)
    if ref.family.name == "sd3":
        return encode_sd3(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 256)
    if ref.family.name == "flux":
        return encode_flux(mm, ref, text, max_tokens=max_tokens or ref.family.max_text_tokens or 512)
    return encode_clip(mm, ref, text)
