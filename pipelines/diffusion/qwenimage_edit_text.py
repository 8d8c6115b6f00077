"""Qwen-Image-Edit prompt encoding: the pictures go through Qwen2.5-VL with the prompt, and through the VAE as
reference latents.

Lives here: `encode_qwenimage_edit`, `edit_inputs`, `edit_counts`, `edit_prompt`, `picture_sizes`,
`calculate_dimensions`, `EditInputs`, `EDIT_TEMPLATE`, `PLUS_TEMPLATE`, `PICTURE_PROMPT`, `EDIT_TEMPLATE_START`,
`VAE_AREA`, `PLUS_VL_AREA`. May import: stdlib, numpy, PIL, torch, transformers, diffusers, memory,
pipelines.diffusion.values / lora / prompt_weights / vae / zimage_text / qwenimage_edit_working /
qwen_vl_counts.

Adapted from diffusers' `QwenImageEditPipeline` (one picture: `plus=False`) and `QwenImageEditPlusPipeline`
(1-3 pictures, 2509/2511: `plus=True`) for one prompt. Each picture is resized twice, as the pipelines do:
to `vae_area` pixels (sides multiples of 32) for the VAE, whose latents become the prompt's `references`
(the loop appends their packed tokens to the image's), and, for Plus, to `vl_area` pixels for Qwen2.5-VL
(the first release shows the VAE-sized picture to it). The text is the pipeline's template with one
`<|image_pad|>` per picture, which is expanded to the picture's merged-patch count; the embeddings are the
last hidden layer past the template's first 64 tokens, uncut (the pipelines do not cut edit prompts).

Pictures are read as the pipelines read them, as 8-bit PIL pictures (a LoadImage picture converts exactly).
Qwen2-VL's image processor is transformers' PIL/numpy class (`Qwen2VLImageProcessorPil`), read from the
folder's `processor/preprocessor_config.json`, never the torchvision one: the pipeline here uses the same
class (torchvision is not installed; transformers falls back to it), and where torchvision is installed the
pipeline's default backend resizes with torchvision's bicubic instead, which this code does not follow.
The encoder's working memory is declared from `edit_counts` (the picture grids and the token count, read
from the folder's configs and tokenizer.json, as `edit_inputs` would make them), and the preprocessing runs
inside the model use: `app plan` stops at that use, before transformers' processor is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from memory import MemoryManager, Working
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.qwen_vl_counts import picture_grid, vision_settings
from pipelines.diffusion.qwenimage_edit_working import edit_text_working_bytes
from pipelines.diffusion.vae import vae_working
from pipelines.diffusion.values import Conditioning, Latents, TextEncoderRef, VaeRef
from pipelines.diffusion.zimage_text import text_encoder_config

# The templates the pipelines' __init__ set (diffusers.pipelines.qwenimage.pipeline_qwenimage_edit and
# _edit_plus), quoted verbatim: values, not functions, so no `Copied from` marker for the checker.
_SYSTEM = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a "
    "new image that meets the user's requirements while maintaining consistency with the original input "
    "where appropriate.<|im_end|>\n<|im_start|>user\n"
)
EDIT_TEMPLATE = _SYSTEM + "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n"
PLUS_TEMPLATE = _SYSTEM + "{}<|im_end|>\n<|im_start|>assistant\n"
PICTURE_PROMPT = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"  # Plus: one per picture, 1-based
IMAGE_PAD = "<|image_pad|>"
EDIT_TEMPLATE_START = 64  # `prompt_template_encode_start_idx`: the system turn's tokens in Qwen's tokenizer
VAE_AREA = 1024 * 1024  # `VAE_IMAGE_SIZE` (Plus) and the first release's `calculate_dimensions(1024 * 1024)`
PLUS_VL_AREA = 384 * 384  # `CONDITION_IMAGE_SIZE`: what Qwen2.5-VL sees of each picture (Plus)
MAX_PICTURES = 3  # ComfyUI's TextEncodeQwenImageEditPlus takes image1..image3


# Copied from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus.calculate_dimensions
def calculate_dimensions(target_area: int, ratio: float) -> tuple[int, int]:
    width = math.sqrt(target_area * ratio)
    height = width / ratio

    width = round(width / 32) * 32
    height = round(height / 32) * 32

    return width, height


def picture_sizes(width: int, height: int, area: int) -> tuple[int, int]:
    """(width, height) a `width` x `height` picture is resized to: about `area` pixels, multiples of 32."""
    return calculate_dimensions(area, width / height)


@dataclass(frozen=True)
class EditInputs:
    """What one prompt's encoding takes: the VL model's inputs and each picture's VAE pixels."""

    input_ids: torch.Tensor  # (1, tokens), the image pads expanded
    attention_mask: torch.Tensor  # (1, tokens)
    pixel_values: torch.Tensor  # (patches, 3 x 2 x 14 x 14): every picture's patches, in order
    image_grid_thw: torch.Tensor  # (pictures, 3)
    vae_pixels: tuple[torch.Tensor, ...]  # each (1, 3, H, W) in [-1, 1], sides multiples of 32


def _picture_size(image: torch.Tensor) -> tuple[int, int]:
    """(width, height) of an IMAGE (1, H, W, C); a batch is refused."""
    if image.ndim != 4 or image.shape[0] != 1:
        raise ValueError(f"a Qwen-Image-Edit picture is one image, got a batch of shape {tuple(image.shape)}")
    return int(image.shape[2]), int(image.shape[1])


def _to_pil(image: torch.Tensor) -> Image.Image:
    """IMAGE (1, H, W, C) in [0, 1] -> the 8-bit RGB picture the pipelines take."""
    _picture_size(image)
    array = (image[0, :, :, :3].clamp(0, 1).numpy() * 255).round().astype(np.uint8)
    return Image.fromarray(array, mode="RGB")


def _expand_pads(text: str, counts: list[int]) -> str:
    """Each `<|image_pad|>`, in order, becomes as many as its picture has merged patches (`counts`), as
    `Qwen2VLProcessor.replace_image_token` makes it (grid t x h x w // merge**2)."""
    parts = text.split(IMAGE_PAD)
    if len(parts) - 1 != len(counts):
        raise ValueError(f"the prompt has {len(parts) - 1} picture slots for {len(counts)} pictures")
    return parts[0] + "".join(IMAGE_PAD * n + rest for n, rest in zip(counts, parts[1:], strict=True))


def _check_pictures(images: list[torch.Tensor], plus: bool) -> None:
    if not images:
        raise ValueError("Qwen-Image-Edit needs at least one picture")
    if not plus and len(images) != 1:
        raise ValueError(f"Qwen-Image-Edit (the first release) takes one picture, got {len(images)}")


def edit_prompt(text: str, pictures: int, *, plus: bool) -> str:
    """The pipeline's template around `text`, one `<|image_pad|>` per picture (Plus: "Picture i: " each)."""
    if plus:
        return PLUS_TEMPLATE.format("".join(PICTURE_PROMPT.format(i + 1) for i in range(pictures)) + text)
    return EDIT_TEMPLATE.format(text)


def edit_inputs(
    image_processor: Any,
    tokenizer: Any,
    text: str,
    images: list[torch.Tensor],
    *,
    plus: bool,
    vae_area: int = VAE_AREA,
    vl_area: int = PLUS_VL_AREA,
    multiple: int = 16,
) -> EditInputs:
    """The pipeline's step 3 (preprocess the pictures) and `_get_qwen_prompt_embeds`' processor call.
    `multiple` is the pipeline's `VaeImageProcessor` factor (VAE scale x 2); the sizes are multiples of 32."""
    from diffusers.image_processor import VaeImageProcessor

    _check_pictures(images, plus)
    processor = VaeImageProcessor(vae_scale_factor=multiple)
    vl_pictures, vae_pixels = [], []
    for picture in map(_to_pil, images):
        vae_w, vae_h = picture_sizes(picture.width, picture.height, vae_area)
        if plus:
            vl_w, vl_h = picture_sizes(picture.width, picture.height, vl_area)
            vl_pictures.append(processor.resize(picture, vl_h, vl_w))
            vae_pixels.append(processor.preprocess(picture, vae_h, vae_w))
        else:  # the first release: the VL model sees the VAE-sized picture
            resized = processor.resize(picture, vae_h, vae_w)
            vl_pictures.append(resized)
            vae_pixels.append(processor.preprocess(resized, vae_h, vae_w))

    prompt = edit_prompt(text, len(images), plus=plus)
    vision = image_processor(images=vl_pictures, return_tensors="pt")
    grids = vision["image_grid_thw"]
    counts = [int(g.prod()) // image_processor.merge_size**2 for g in grids]
    tokens = tokenizer(_expand_pads(prompt, counts), return_tensors="pt")
    return EditInputs(
        input_ids=tokens.input_ids,
        attention_mask=tokens.attention_mask,
        pixel_values=vision["pixel_values"],
        image_grid_thw=grids,
        vae_pixels=tuple(vae_pixels),
    )


@torch.no_grad()
def _reference(mm: MemoryManager, vae: VaeRef, pixels: torch.Tensor) -> Latents:
    """`QwenImageEditPipeline._encode_vae_image`: the distribution's mode, then (x - mean) / std, in that
    order (VAE Encode's own scaling multiplies by 1 / std, a different rounding)."""
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


def _tokenizer_folder(ref: TextEncoderRef) -> Path:
    """Where the prompt's tokenizer is: `processor/` when it has one (the pipeline's processor reads that),
    else the folder's tokenizer."""
    processor = ref.tokenizers[0].path / "processor"
    if (processor / "tokenizer_config.json").is_file():
        return processor
    return ref.tokenizers[0].path / ref.tokenizers[0].subfolder


def edit_counts(
    ref: TextEncoderRef,
    text: str,
    images: list[torch.Tensor],
    *,
    plus: bool,
    vae_area: int = VAE_AREA,
    vl_area: int = PLUS_VL_AREA,
) -> tuple[int, int]:
    """(tokens, patches) of the `edit_inputs` the encoder will make (`text` without weighting), from the
    pictures' sizes, `processor/preprocessor_config.json` and the tokenizer.json: no transformers import."""
    _check_pictures(images, plus)
    processor = ref.tokenizers[0].path / "processor"
    why = "a Qwen-Image-Edit diffusers folder has a processor/ subfolder; picture prompts need it"
    settings = vision_settings(processor, why)
    area = vl_area if plus else vae_area  # the first release shows the VL model the VAE-sized picture
    grids = [picture_grid(settings, *picture_sizes(*_picture_size(i), area)) for i in images]
    counts = [math.prod(g) // settings.merge_size**2 for g in grids]
    counter = ref.tokenizers[0].counter(_tokenizer_folder(ref))
    tokens = counter.count(_expand_pads(edit_prompt(text, len(images), plus=plus), counts))
    return tokens, sum(math.prod(g) for g in grids)


def _load_processor_parts(ref: TextEncoderRef) -> tuple[Any, Any]:
    """The folder's Qwen2-VL image processor (PIL class) and the tokenizer beside it in `processor/`."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = ref.tokenizers[0].path / "processor"
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder), local_files_only=True)
    has_tokenizer = _tokenizer_folder(ref) == folder
    tokenizer = (
        AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        if has_tokenizer
        else ref.tokenizers[0].load()
    )
    return image_processor, tokenizer


@torch.no_grad()
def encode_qwenimage_edit(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    images: list[torch.Tensor],
    *,
    vae: VaeRef | None,
    plus: bool,
    vae_area: int = VAE_AREA,
    vl_area: int = PLUS_VL_AREA,
) -> Conditioning:
    """One prompt with 1-3 pictures -> its embeddings and (with a VAE) the pictures' reference latents."""
    # 1. The prompt's size (weighting dropped): what the encoder's working memory is declared from
    text = strip_weights(text)
    tokens, patches = edit_counts(ref, text, images, plus=plus, vae_area=vae_area, vl_area=vl_area)
    config = text_encoder_config(ref)
    working = Working(edit_text_working_bytes(config, tokens, patches, ref.dtype), f"1x{tokens}+{patches}p")

    # 2. Qwen2.5-VL over the text and the pictures: the last hidden layer past the system turn
    with use_text_encoder(mm, ref, 0, working=working) as te:
        # The pictures resized as the pipeline does and the template with their slots, here in the use:
        # `app plan` stops at the use, before transformers' processor and diffusers' resize are imported
        image_processor, tokenizer = _load_processor_parts(ref)
        scale = vae.scale_factor if vae is not None else 8
        inputs = edit_inputs(
            image_processor,
            tokenizer,
            text,
            images,
            plus=plus,
            vae_area=vae_area,
            vl_area=vl_area,
            multiple=scale * 2,
        )
        states = te(
            input_ids=inputs.input_ids.to(mm.device),
            attention_mask=inputs.attention_mask.to(mm.device),
            pixel_values=inputs.pixel_values.to(device=mm.device, dtype=ref.dtype),
            image_grid_thw=inputs.image_grid_thw.to(mm.device),
            output_hidden_states=True,
        ).hidden_states[-1]
        embeds = states[:, EDIT_TEMPLATE_START:].to(ref.dtype)  # (1, prompt tokens, hidden)
    cond = Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)

    # 3. The pictures' VAE latents, in order, as the prompt's references (ComfyUI: `reference_latents`)
    if vae is None:
        return cond
    references = tuple(_reference(mm, vae, pixels) for pixels in inputs.vae_pixels)
    return replace(cond, references=references)
