"""Pictures into an LLM: Qwen2.5-VL / Qwen2-VL / Qwen3-VL folders answer about input images.

Lives here: `VISION_MODEL_TYPES`, `is_vision_config`, `load_image_processor`, `build_vision_lm`, `VisionInputs`,
`vision_inputs`, `VisionPrompt`, `vision_working_bytes_for`, `to_pil`. Imports torch, numpy, PIL, transformers,
`pipelines.load_progress`, `pipelines.llm.hf_loader` and `pipelines.diffusion.qwenimage_edit_working` (the vision tower's working-memory
formula, shared with Qwen-Image-Edit's text encoder); never nodes/, app/ or Qt.

The prompt is what transformers' `Qwen2VLProcessor` makes of a chat turn with pictures: the chat template
writes one `<|vision_start|><|image_pad|><|vision_end|>` per picture, each pad is repeated once per merged
patch of its picture (grid t*h*w / merge**2), and `mm_token_type_ids` marks those pads (1 = image), which
the model needs to build its 3-D (time, height, width) rotary positions. The image processor is
transformers' PIL class (`Qwen2VLImageProcessorPil`, no torchvision here), read from the folder's
`preprocessor_config.json`; Qwen3-VL uses the same class with 16 px patches.

Generation runs through our loop (`generate.generate`): `VisionPrompt` wraps the transformers model as a
compact-style decoder whose first step (the prefill) carries the pictures; later steps feed one token and
let the model continue its rotary positions from the offset (`rope_deltas`) it computed at prefill, as
transformers' own `generate` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import DynamicCache, PretrainedConfig

from pipelines.llm.hf_loader import LLMFiles, build_causal_lm
from pipelines.load_progress import OnProgress

VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
IMAGE_PAD = "<|image_pad|>"
MAX_PICTURES = 8


def is_vision_config(config: PretrainedConfig) -> bool:
    return str(getattr(config, "model_type", "")) in VISION_MODEL_TYPES


def load_image_processor(folder: Path) -> Any:
    """The folder's Qwen2-VL image processor, as the PIL class whatever the file names."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if not (Path(folder) / "preprocessor_config.json").is_file():
        raise ValueError(
            f"{folder}: no preprocessor_config.json (a vision model folder needs its image processor)"
        )
    return Qwen2VLImageProcessorPil.from_pretrained(str(folder), local_files_only=True)


def build_vision_lm(
    files: LLMFiles, dtype: torch.dtype, on_progress: OnProgress | None = None
) -> torch.nn.Module:
    """The image-text-to-text model (text and vision tower) in `dtype`, in eval mode, built as
    `hf_loader.build_causal_lm` builds a text model (empty, then the memory-mapped tensors assigned)."""
    from transformers import AutoModelForImageTextToText

    return build_causal_lm(files, dtype, on_progress, auto_class=AutoModelForImageTextToText)


def to_pil(image: torch.Tensor) -> list[Image.Image]:
    """IMAGE (B, H, W, C) in [0, 1] -> B 8-bit RGB pictures (what the processor takes)."""
    if image.ndim != 4 or image.shape[-1] not in (1, 3, 4):
        raise ValueError(f"an IMAGE is (batch, height, width, channels), got shape {tuple(image.shape)}")
    array = (image[..., :3].clamp(0, 1).cpu().float().numpy() * 255).round().astype(np.uint8)
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    return [Image.fromarray(a, mode="RGB") for a in array]


@dataclass(frozen=True)
class VisionInputs:
    """One prompt with its pictures, as the processor gives them (batch of one)."""

    input_ids: torch.Tensor  # (1, S), the image pads expanded
    attention_mask: torch.Tensor  # (1, S)
    mm_token_type_ids: torch.Tensor  # (1, S): 1 on image pads
    pixel_values: torch.Tensor  # (patches, C * T * P * P)
    image_grid_thw: torch.Tensor  # (pictures, 3)

    @property
    def ids(self) -> list[int]:
        return self.input_ids[0].tolist()

    def prefill_kwargs(self, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return {
            "attention_mask": self.attention_mask.to(device),
            "mm_token_type_ids": self.mm_token_type_ids.to(device),
            "pixel_values": self.pixel_values.to(device=device, dtype=dtype),
            "image_grid_thw": self.image_grid_thw.to(device),
        }


def vision_messages(prompt: str, pictures: int, system_prompt: str = "") -> list[dict[str, Any]]:
    """A chat turn with the pictures first, then the text (Qwen-VL's documented order)."""
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    content = [{"type": "image"} for _ in range(pictures)] + [{"type": "text", "text": prompt}]
    messages.append({"role": "user", "content": content})
    return messages


def vision_inputs(
    tokenizer: Any,
    image_processor: Any,
    image_token_id: int,
    prompt: str,
    images: Sequence[Image.Image],
    *,
    system_prompt: str = "",
    chat: bool = True,
) -> VisionInputs:
    """What `Qwen2VLProcessor(images=..., text=chat_template(...))` gives (see the module docstring)."""
    if not images:
        raise ValueError("a vision prompt needs at least one picture")
    if len(images) > MAX_PICTURES:
        raise ValueError(f"at most {MAX_PICTURES} pictures a prompt, got {len(images)}")
    pad = tokenizer.convert_ids_to_tokens(image_token_id)
    if chat and getattr(tokenizer, "chat_template", None):
        messages = vision_messages(prompt, len(images), system_prompt)
        text = str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    else:  # no template: the picture slots, then the text
        slot = f"<|vision_start|>{pad}<|vision_end|>"
        text = slot * len(images) + (f"{system_prompt}\n\n{prompt}" if system_prompt else prompt)
    vision = image_processor(images=list(images), return_tensors="pt")
    grids = vision["image_grid_thw"]
    parts = text.split(pad)
    if len(parts) - 1 != len(grids):
        raise ValueError(f"the chat template wrote {len(parts) - 1} picture slots for {len(grids)} pictures")
    merge = int(image_processor.merge_size)
    counts = [int(g.prod()) // merge**2 for g in grids]  # Qwen2VLProcessor.replace_image_token
    expanded = parts[0] + "".join(pad * n + rest for n, rest in zip(counts, parts[1:], strict=True))
    tokens = tokenizer(expanded, add_special_tokens=False, return_tensors="pt")
    ids = tokens["input_ids"]
    return VisionInputs(
        input_ids=ids,
        attention_mask=tokens["attention_mask"],
        mm_token_type_ids=(ids == image_token_id).to(torch.long),
        pixel_values=vision["pixel_values"],
        image_grid_thw=grids,
    )


class VisionPrompt(torch.nn.Module):
    """A transformers VL model seen as a compact decoder (`step`, `new_kv`) for one prompt with pictures."""

    compact = True  # generate.py calls `step` with the cache `new_kv` made

    def __init__(self, model: torch.nn.Module, inputs: VisionInputs, text_config: PretrainedConfig) -> None:
        super().__init__()
        self.model = model
        self.inputs = inputs
        self.text_config = text_config
        self.dtype = next(model.parameters()).dtype

    def new_kv(self, max_tokens: int) -> DynamicCache:
        return DynamicCache(config=self.text_config)

    def step(self, ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """ids (1, S) -> logits of the last position (1, V); the first call is the prefill with the pictures."""
        extra: dict[str, torch.Tensor] = {}
        if cache.get_seq_length() == 0:
            assert ids.shape[1] == self.inputs.input_ids.shape[1], "the prefill is the processor's prompt"
            extra = self.inputs.prefill_kwargs(ids.device, self.dtype)
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1, **extra)
        return out.logits[:, -1, :]


def vision_working_bytes_for(config: PretrainedConfig, inputs: VisionInputs, dtype: torch.dtype) -> int:
    """The vision tower's peak over this prompt's patches: Qwen-Image-Edit's formula for Qwen2.5-VL's tower,
    checked against that tower only (Qwen3-VL's has no windowed blocks; not measured against it yet)."""
    from pipelines.diffusion.qwenimage_edit_working import vision_working_bytes

    vision = config.vision_config.to_dict() if hasattr(config, "vision_config") else {}
    return vision_working_bytes(vision, int(inputs.pixel_values.shape[0]), dtype)
