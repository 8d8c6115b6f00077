"""Qwen-Image 2.1 prompt encoding: Qwen3-VL reads the pipeline's template, with the edit pictures when there
are any, and the pictures' VAE latents become the prompt's references.

Lives here: `encode_qwenimage21`, `picture_inputs`, `picture_counts`, `output_size`, `calculate_dimensions`,
`PictureInputs`, `SYSTEM_PROMPT`, `T2I_TEMPLATE`, `TI2I_TEMPLATE`, `PICTURE_SLOT`. May import: stdlib, numpy,
PIL, torch, transformers, diffusers, memory, pipelines.diffusion.values / lora / prompt_weights / vae /
zimage_text / qwenimage_text / qwenimage_edit_working / qwen_vl_counts.

Adapted from diffusers' `QwenImage21Pipeline._get_qwen_prompt_embeds` and its `__call__` step 1 for one
prompt. The template is a hand-built string (not the chat template; the checkpoint expects it); with pictures
each gets an `<imageN><|vision_start|><|image_pad|><|vision_end|>` slot, whose pad is expanded to the
picture's merged-patch count as `Qwen3VLProcessor` does. The embeddings are the last decoder layer's output
*before* the final RMSNorm (the pipeline neutralises the norm with a forward hook: transformers 5 returns
the normed state there), past the system turn's tokens; `image_slots` marks the picture tokens among them.
Each picture is resized once, to about `area` pixels (sides multiples of 32, PIL Lanczos via diffusers'
`VaeImageProcessor`), as RGBA: the VAE reads all four channels, Qwen3-VL the picture over white. Qwen3-VL's
image processor is transformers' PIL class (`Qwen2VLImageProcessorPil`, from `processor/`), never the
torchvision one (not installed here; the pipeline falls back to the same class). The encoder's working
memory is declared from `picture_counts` (grids and token counts from the folder's configs and
tokenizer.json) and the preprocessing runs inside the model use, where `app plan` stops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from PIL import Image

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.qwen_vl_counts import picture_grid, vision_settings
from pipelines.diffusion.qwenimage_edit_working import edit_text_working_bytes
from pipelines.diffusion.qwenimage_text import qwenimage_text_working_bytes
from pipelines.diffusion.vae import vae_working
from pipelines.diffusion.values import Conditioning, Latents, TextEncoderRef, VaeRef
from pipelines.diffusion.zimage_text import text_encoder_config

# QwenImage21Pipeline.__init__'s templates, quoted verbatim: values, not functions, so no `Copied from` marker.
SYSTEM_PROMPT = "Comprehend and analyze the provided prompt."
_SYSTEM_TURN = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
T2I_TEMPLATE = _SYSTEM_TURN + "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PICTURE_SLOT = "<image{}><|vision_start|><|image_pad|><|vision_end|>"  # 1-based; joined by a space
TI2I_TEMPLATE = _SYSTEM_TURN + "<|im_start|>user\n{}{}<|im_end|>\n<|im_start|>assistant\n"  # slots, prompt
IMAGE_PAD = "<|image_pad|>"
MAX_PICTURES = 3


# Copied from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit.calculate_dimensions
def calculate_dimensions(target_area, ratio):
    width = math.sqrt(target_area * ratio)
    height = width / ratio

    width = round(width / 32) * 32
    height = round(height / 32) * 32

    return width, height, None


def output_size(width: int, height: int, resolution: int) -> tuple[int, int]:
    """(width, height) of a `width` x `height` picture at about `resolution`**2 pixels, multiples of 32 (the
    pipeline's size for pictures and, from the last one, its output); 0 keeps the picture's own area."""
    area = resolution * resolution if resolution > 0 else width * height
    w, h, _ = calculate_dimensions(area, width / height)
    return max(int(w), 32), max(int(h), 32)


@dataclass(frozen=True)
class PictureInputs:
    """One prompt's Qwen3-VL inputs and each picture's VAE pixels."""

    input_ids: torch.Tensor  # (1, tokens), the image pads expanded
    attention_mask: torch.Tensor  # (1, tokens)
    pixel_values: torch.Tensor | None  # (patches, 3 x 2 x 16 x 16), every picture's in order
    image_grid_thw: torch.Tensor | None  # (pictures, 3)
    vae_pixels: tuple[torch.Tensor, ...]  # each (1, 4, H, W) in [-1, 1], RGBA


def _picture_size(image: torch.Tensor) -> tuple[int, int]:
    """(width, height) of an IMAGE (1, H, W, C); a batch is refused."""
    if image.ndim != 4 or image.shape[0] != 1:
        raise ValueError(f"a Qwen-Image 2.1 picture is one image, got a batch of shape {tuple(image.shape)}")
    return int(image.shape[2]), int(image.shape[1])


def _to_rgba(image: torch.Tensor) -> Image.Image:
    """IMAGE (1, H, W, C) in [0, 1] -> the 8-bit RGBA picture the pipeline converts every input to."""
    _picture_size(image)
    array = (image[0].clamp(0, 1).numpy() * 255).round().astype(np.uint8)
    mode = "RGBA" if array.shape[-1] == 4 else "RGB"
    return Image.fromarray(array[..., :4] if mode == "RGBA" else array[..., :3], mode=mode).convert("RGBA")


def _over_white(picture: Image.Image) -> Image.Image:
    """The pipeline's copy for the vision encoder: the alpha composited over white."""
    white = Image.new("RGB", picture.size, (255, 255, 255))
    white.paste(picture, mask=picture.getchannel("A"))
    return white


def _expand_pads(text: str, counts: list[int]) -> str:
    """Each `<|image_pad|>`, in order, becomes its picture's merged-patch count (`counts`) of them, as
    `Qwen3VLProcessor.replace_image_token` makes it (grid t x h x w // merge**2)."""
    parts = text.split(IMAGE_PAD)
    return parts[0] + "".join(IMAGE_PAD * n + rest for n, rest in zip(counts, parts[1:], strict=True))


def _prompt(text: str, pictures: int) -> str:
    """The pipeline's template (`text` already non-empty), one slot per picture."""
    if not pictures:
        return T2I_TEMPLATE.format(text)
    return TI2I_TEMPLATE.format(" ".join(PICTURE_SLOT.format(i + 1) for i in range(pictures)), text)


def picture_inputs(
    image_processor: Any,
    tokenizer: Any,
    text: str,
    images: list[torch.Tensor],
    *,
    resolution: int,
    latent_channels: int = 64,
) -> PictureInputs:
    """The pipeline's step 1 (one resize feeds the VL model and the VAE) and its processor call.
    `latent_channels` is the VAE's `z_dim`, as the pipeline's `VaeImageProcessor` has it (its preprocess
    passes a tensor with that many channels through as latents, so the default 4 would skip an RGBA's)."""
    from diffusers.image_processor import VaeImageProcessor

    text = text or " "  # Qwen has no bos token: an empty prompt would leave the encoder nothing to read
    if not images:
        tokens = tokenizer(_prompt(text, 0), return_tensors="pt")
        return PictureInputs(tokens.input_ids, tokens.attention_mask, None, None, ())
    processor = VaeImageProcessor(vae_scale_factor=16, vae_latent_channels=latent_channels)
    vl_pictures, vae_pixels = [], []
    for picture in map(_to_rgba, images):
        w, h = output_size(picture.width, picture.height, resolution)
        vl_pictures.append(_over_white(processor.resize(picture, width=w, height=h)))
        vae_pixels.append(processor.preprocess(picture, width=w, height=h))
    vision = image_processor(images=vl_pictures, return_tensors="pt")
    grids = vision["image_grid_thw"]
    counts = [int(g.prod()) // image_processor.merge_size**2 for g in grids]
    prompt = _expand_pads(_prompt(text, len(images)), counts)
    tokens = tokenizer(prompt, return_tensors="pt")
    return PictureInputs(
        tokens.input_ids, tokens.attention_mask, vision["pixel_values"], grids, tuple(vae_pixels)
    )


def picture_counts(
    ref: TextEncoderRef, text: str, images: list[torch.Tensor] | tuple[torch.Tensor, ...], *, resolution: int
) -> tuple[int, int]:
    """(tokens, patches) of the `picture_inputs` the encoder will make (`text` without weighting), from the
    pictures' sizes, the folder's preprocessor_config.json and tokenizer.json: no transformers import."""
    source = ref.tokenizers[0]
    folder = source.path / source.subfolder
    counter = source.counter()
    counts, patches = [], 0
    if images:
        why = "a Qwen-Image 2.1 diffusers folder has a processor/ subfolder; pictures need it"
        settings = vision_settings(folder, why)
        for image in images:
            w, h = output_size(*_picture_size(image), resolution)
            grid = picture_grid(settings, w, h)
            patches += math.prod(grid)
            counts.append(math.prod(grid) // settings.merge_size**2)
    tokens = counter.count(_expand_pads(_prompt(text or " ", len(images)), counts))
    return tokens, patches


def _load_image_processor(ref: TextEncoderRef) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = ref.tokenizers[0].path / ref.tokenizers[0].subfolder
    return Qwen2VLImageProcessorPil.from_pretrained(str(folder), local_files_only=True)


def _drop_count(tokenizer: Any) -> int:
    """The system turn's token count (the pipeline's `_drop_idx`, from the same turn its template starts with)."""
    return len(tokenizer(_SYSTEM_TURN).input_ids)


@torch.no_grad()
def _reference(mm: MemoryManager, vae: VaeRef, pixels: torch.Tensor) -> Latents:
    """`QwenImage21Pipeline._encode_vae_image`: the distribution's mode, then (x - mean) / std."""
    config = vae.config
    pixels = pixels.to(device=mm.device, dtype=vae.dtype)
    working = vae_working(vae, pixels.shape[-2], pixels.shape[-1], 1, "vae_encode")
    with mm.use(vae.handle, working=working) as model:
        latents = model.encode(pixels.unsqueeze(2)).latent_dist.mode()  # (1, C, 1 frame, h, w)
    channels = latents.shape[1]
    mean = torch.tensor(config["latents_mean"]).view(1, channels, 1, 1, 1).to(latents.device, latents.dtype)
    std = torch.tensor(config["latents_std"]).view(1, channels, 1, 1, 1).to(latents.device, latents.dtype)
    latents = ((latents - mean) / std)[:, :, 0]
    return Latents(samples=latents.cpu(), vae_scale_factor=vae.scale_factor, source="encoded")


@torch.no_grad()
def encode_qwenimage21(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    images: list[torch.Tensor] | tuple[torch.Tensor, ...] = (),
    *,
    vae: VaeRef | None = None,
    resolution: int = 1024,
) -> Conditioning:
    """One prompt (and 0-3 pictures) -> embeddings, their image slots and (with a VAE) reference latents."""
    # 1. The prompt's size (weighting syntax dropped: Qwen takes plain text): what the working memory is
    if len(images) > MAX_PICTURES:
        raise ValueError(f"Qwen-Image 2.1 takes at most {MAX_PICTURES} pictures here, got {len(images)}")
    text = strip_weights(text)
    tokens, patches = picture_counts(ref, text, images, resolution=resolution)
    config = text_encoder_config(ref)
    if images:
        formula, shape = edit_text_working_bytes(config, tokens, patches, ref.dtype), f"1x{tokens}+{patches}p"
    else:
        formula, shape = qwenimage_text_working_bytes(config, tokens, ref.dtype), f"1x{tokens}"

    # 2. Qwen3-VL: the last decoder layer's output, before the final norm, past the system turn
    with use_text_encoder(mm, ref, 0, working=Working(formula, shape)) as te:
        # The template and the pictures, resized once, here in the use: `app plan` stops at the use, before
        # transformers' tokenizer and processor and diffusers' resize are imported
        tokenizer = ref.tokenizers[0].load()
        image_processor = _load_image_processor(ref) if images else None
        channels = vae.latent_channels if vae is not None else 64
        inputs = picture_inputs(
            image_processor, tokenizer, text, list(images), resolution=resolution, latent_channels=channels
        )
        image_token = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        drop = _drop_count(tokenizer)
        ids = inputs.input_ids
        kwargs: dict[str, Any] = {"mm_token_type_ids": (ids == image_token).long().to(mm.device)}
        if inputs.pixel_values is not None:
            kwargs["pixel_values"] = inputs.pixel_values.to(device=mm.device, dtype=ref.dtype)
            kwargs["image_grid_thw"] = inputs.image_grid_thw.to(mm.device)
        language = getattr(te.model, "language_model", te.model)
        handle = language.norm.register_forward_hook(lambda module, args, output: args[0])
        try:
            states = te(
                input_ids=ids.to(mm.device),
                attention_mask=inputs.attention_mask.to(mm.device),
                output_hidden_states=True,
                **kwargs,
            ).hidden_states[-1]
        finally:
            handle.remove()
        embeds = states[:, drop:]  # (1, prompt tokens, hidden)
    slots = (ids == image_token)[:, drop:]
    cond = Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text, image_slots=slots)

    # 3. The pictures' VAE latents, in order, as the prompt's references
    if vae is None or not inputs.vae_pixels:
        return cond
    return replace(cond, references=tuple(_reference(mm, vae, p) for p in inputs.vae_pixels))
