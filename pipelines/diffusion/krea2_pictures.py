"""Krea 2 prompts with pictures: ComfyUI's TextEncodeQwenImageEditPlus on Krea 2's Qwen3-VL text encoder.

Lives here: `encode_krea2_pictures`, `comfy_area_size`, `comfy_area_resize`, `qwen3vl_patches`,
`picture_prompt`, `KREA2_VL_AREA`, `KREA2_VAE_AREA`. May import: stdlib, torch, memory,
pipelines.diffusion.values / lora / prompt_weights / vae / zimage_text / krea2_text / qwenimage_edit_text /
qwenimage_edit_working / qwenimage21_text / qwen_vl_counts (smart_resize).

diffusers has no Krea 2 pipeline that reads pictures, so this follows ComfyUI (the reference for the style-
reference template), read from its sources at the July-August 2026 commits: comfy_extras/nodes_qwen.py
(`TextEncodeQwenImageEditPlus.execute`), comfy/text_encoders/krea2.py (`Krea2Tokenizer`, `Krea2TEModel`),
comfy/text_encoders/qwen3vl.py and qwen_vl.py (`preprocess_embed`, `process_qwen2vl_images`):

- each picture is resized with torch's "area" interpolation to about 384 x 384 px (sides `round(side *
  scale)`), then, for the vision tower, bilinearly (align_corners False, no antialias) to sides the nearest
  multiple of patch x merge (32), scaled to [-1, 1] (mean = std = 0.5) and cut into Qwen2-VL's patch order;
- the text is Qwen-Image-Edit Plus's template (the node passes its own system turn, so Krea 2's is not used)
  with `Picture N: <|vision_start|><|image_pad|><|vision_end|>` per picture before the prompt, no think block
  (Krea 2's tokenizer reads with `thinking=True`); each pad becomes the picture's merged patches;
- Krea 2's twelve taps are stacked per token and everything up to the second `<|im_start|>` plus its "user\n"
  is dropped (the picture tokens stay); there is no padding and so no mask (ComfyUI's tokens are exact);
- with a VAE, each picture is area-resized to about 1024 x 1024 px (sides multiples of 8) and its latents
  ((mode - mean) / std, as ComfyUI's Wan 2.1 latent format normalises them) become the prompt's references.

The positions (mRoPE) and DeepStack features are transformers' `Qwen3VLModel` own, which give ComfyUI's
layout (text counts on; a picture's tokens sit at its grid from the position it starts at; the text after
resumes past the larger grid side). The taps are read as ComfyUI reads them, each decoder layer's input
(`_layer_inputs`: at the picture tokens the first taps differ from transformers' `hidden_states` by a
DeepStack addition).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from memory import MemoryManager, Working
from pipelines.diffusion.krea2_text import krea2_text_working_bytes, select_layers
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.qwen_vl_counts import smart_resize
from pipelines.diffusion.qwenimage21_text import _reference
from pipelines.diffusion.qwenimage_edit_text import PICTURE_PROMPT, PLUS_TEMPLATE
from pipelines.diffusion.qwenimage_edit_working import edit_text_working_bytes
from pipelines.diffusion.values import Conditioning, TextEncoderRef, VaeRef
from pipelines.diffusion.zimage_text import text_encoder_config

KREA2_VL_AREA = 384 * 384  # what Qwen3-VL sees of each picture (the node's `total` for the VL copy)
KREA2_VAE_AREA = 1024 * 1024  # the reference latents' picture size
IMAGE_PAD = "<|image_pad|>"
IM_START = "<|im_start|>"
MAX_PICTURES = 3


def comfy_area_size(width: int, height: int, area: int, multiple: int = 1) -> tuple[int, int]:
    """(width, height) ComfyUI's node scales a picture to: `area` pixels, each side rounded (to `multiple`)."""
    scale = math.sqrt(area / (width * height))
    return (
        max(multiple, round(width * scale / multiple) * multiple),
        max(multiple, round(height * scale / multiple) * multiple),
    )


def comfy_area_resize(image: torch.Tensor, area: int, multiple: int = 1) -> torch.Tensor:
    """IMAGE (1, H, W, C) -> (1, h, w, 3) of about `area` pixels, as `comfy.utils.common_upscale(..., "area")`."""
    if image.ndim != 4 or image.shape[0] != 1:
        raise ValueError(f"a Krea 2 picture is one image, got a batch of shape {tuple(image.shape)}")
    w, h = comfy_area_size(image.shape[2], image.shape[1], area, multiple)
    samples = image[..., :3].movedim(-1, 1).float()
    return F.interpolate(samples, size=(h, w), mode="area").movedim(1, -1)


def qwen3vl_patches(image: torch.Tensor, vision: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """`process_qwen2vl_images` for one (1, H, W, 3) picture in [0, 1] with Qwen3-VL's mean = std = 0.5:
    (patches, 3 x temporal x patch x patch) in Qwen2-VL's order and its (1, 3) grid."""
    patch = int(vision.get("patch_size", 16))
    merge = int(vision.get("spatial_merge_size", 2))
    temporal = int(vision.get("temporal_patch_size", 2))
    _, height, width, _ = image.shape
    # smart_resize's own defaults (3136 and 12845056 pixels), which the Qwen3-VL path keeps
    h_bar, w_bar = smart_resize(height, width, factor=patch * merge)
    pixels = F.interpolate(image.movedim(-1, 1), size=(h_bar, w_bar), mode="bilinear", align_corners=False)[0]
    pixels = (pixels - 0.5) / 0.5
    grid_h, grid_w = h_bar // patch, w_bar // patch
    frames = pixels.unsqueeze(0).repeat(temporal, 1, 1, 1)  # a still picture fills the temporal patch
    patches = frames.reshape(1, temporal, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_h * grid_w, 3 * temporal * patch * patch)
    return flat, torch.tensor([[1, grid_h, grid_w]], dtype=torch.long)


def picture_prompt(text: str, grids: list[torch.Tensor], merge: int) -> str:
    """The node's text: Qwen-Image-Edit Plus's template with one `Picture N:` slot per picture before the
    prompt, each pad repeated to its picture's merged-patch count (ComfyUI swaps the one pad for them)."""
    slots = "".join(
        PICTURE_PROMPT.format(i + 1).replace(IMAGE_PAD, IMAGE_PAD * (int(g.prod()) // merge**2))
        for i, g in enumerate(grids)
    )
    return PLUS_TEMPLATE.format(slots + text)


def _template_end(ids: list[int], tokenizer: Any) -> int:
    """`Krea2TEModel.encode_token_weights`' cut: the second `<|im_start|>`, past its "user\\n" when present."""
    start = tokenizer.convert_tokens_to_ids(IM_START)
    starts = [i for i, t in enumerate(ids) if t == start][:2]
    end = starts[-1] if starts else 0
    user = tokenizer("user\n", add_special_tokens=False).input_ids
    if ids[end + 1 : end + 1 + len(user)] == user and len(ids) > end + 1 + len(user):
        end += 1 + len(user)
    return end


class _LayerInputs:
    """What each chosen decoder layer is given (ComfyUI's tap k), held while the encoder runs."""

    def __init__(self, layers: torch.nn.ModuleList, wanted: tuple[int, ...]) -> None:
        self.seen: dict[int, torch.Tensor] = {}
        self._handles = [
            layers[k].register_forward_pre_hook(self._keeper(k)) for k in wanted if k < len(layers)
        ]

    def _keeper(self, k: int) -> Any:
        def keep(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            self.seen[k] = args[0]

        return keep

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def _layer_inputs(te: torch.nn.Module, wanted: tuple[int, ...]) -> _LayerInputs:
    """ComfyUI's tap k is decoder layer k's input, DeepStack's visual features already added after layers
    0-2; transformers' `hidden_states[k]` is layer k-1's output before that addition. The two agree on text
    (Krea 2's plain prompts read `hidden_states`) and on every tap past the DeepStack layers; a tap at the
    layer count (none of Krea 2's) is the final normed state in both."""
    language = getattr(te, "language_model", None) or te.model.language_model
    return _LayerInputs(language.layers, wanted)


@torch.no_grad()
def encode_krea2_pictures(
    mm: MemoryManager,
    ref: TextEncoderRef,
    text: str,
    images: list[torch.Tensor],
    *,
    vae: VaeRef | None,
    vl_area: int = KREA2_VL_AREA,
    vae_area: int = KREA2_VAE_AREA,
) -> Conditioning:
    """One prompt with 0-3 pictures -> Krea 2's stacked taps (no mask) and, with a VAE, reference latents."""
    # 1. The pictures as Qwen3-VL reads them, and the node's template with their slots
    if len(images) > MAX_PICTURES:
        raise ValueError(f"Krea 2 takes at most {MAX_PICTURES} pictures here (image1..3), got {len(images)}")
    tokenizer = ref.tokenizers[0].load()
    text = strip_weights(text)
    config = text_encoder_config(ref)
    vision = dict(config.get("vision_config") or {})
    merge = int(vision.get("spatial_merge_size", 2))
    pieces = [qwen3vl_patches(comfy_area_resize(image, vl_area), vision) for image in images]
    grids = [grid[0] for _, grid in pieces]
    ids = tokenizer(picture_prompt(text, grids, merge), return_tensors="pt").input_ids
    kwargs: dict[str, Any] = {}
    patches = 0
    if pieces:
        pixel_values = torch.cat([p for p, _ in pieces])
        patches = pixel_values.shape[0]
        image_token = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        kwargs["pixel_values"] = pixel_values.to(device=mm.device, dtype=ref.dtype)
        kwargs["image_grid_thw"] = torch.cat([g for _, g in pieces]).to(mm.device)
        kwargs["mm_token_type_ids"] = (ids == image_token).long().to(mm.device)

    # 2. Krea 2's taps over the text and the pictures, past the system turn and the user turn's opening
    layers = select_layers(ref)
    tokens = ids.shape[1]
    formula = krea2_text_working_bytes(config, tokens, len(layers), ref.dtype)
    if patches:
        formula = max(formula, edit_text_working_bytes(config, tokens, patches, ref.dtype))
    end = _template_end(ids[0].tolist(), tokenizer)
    with use_text_encoder(mm, ref, 0, working=Working(formula, f"1x{tokens}+{patches}p")) as te:
        taps = _layer_inputs(te, layers)
        try:
            states = te(
                input_ids=ids.to(mm.device),
                attention_mask=torch.ones_like(ids).to(mm.device),
                output_hidden_states=True,
                **kwargs,
            ).hidden_states
        finally:
            taps.close()
        chosen = [taps.seen.get(i, states[i]) for i in layers]
        embeds = torch.stack(chosen, dim=2)[:, end:]  # (1, S, layers, hidden)
    cond = Conditioning(embeds=embeds.cpu(), family=ref.family.name, text=text)

    # 3. The pictures' VAE latents, in order, as the prompt's references (ComfyUI: `reference_latents`)
    if vae is None or not images:
        return cond
    pixels = [comfy_area_resize(image, vae_area, multiple=8).movedim(-1, 1) * 2 - 1 for image in images]
    return replace(cond, references=tuple(_reference(mm, vae, p) for p in pixels))
