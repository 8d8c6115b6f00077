"""Qwen-VL prompt sizes without transformers' processor: a picture's patch grid from the folder's
`preprocessor_config.json` and a text's token count from its `tokenizer.json`.

Lives here: `VisionSettings`, `vision_settings`, `smart_resize`, `picture_grid`, `TokenCounter`,
`token_counter`. May import: stdlib, tokenizers (the Rust library), transformers only as the fallback for a
tokenizer folder without a tokenizer.json.

Why: the Qwen-VL text encoders (Qwen-Image-Edit, Qwen-Image 2.1, MiniMax H3) declare their working memory
from the prompt's token count and the pictures' patch count before their model use, and `app plan` stops at
that use. Importing transformers' image processor costs seconds (it pulls processing_utils and
modeling_utils), the tokenizers library a hundredth of one, so the counts come from here and the real
preprocessing (transformers' `Qwen2VLImageProcessorPil` and tokenizer) runs inside the use.
tests/test_qwen_vl_counts.py checks these counts against transformers' on the tiny demo folders.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PREPROCESSOR_CONFIG = "preprocessor_config.json"


@dataclass(frozen=True)
class VisionSettings:
    """What `Qwen2VLImageProcessorPil` reads from a preprocessor_config.json to cut a picture into patches
    (its class defaults where the file is silent)."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    do_resize: bool = True


def vision_settings(folder: Path, why: str) -> VisionSettings:
    """`folder`'s preprocessor_config.json as the processor's `__init__` reads it: `size`'s shortest and
    longest edge (pixel counts), which `min_pixels` / `max_pixels` override. `why` ends the missing-file
    message (what needs the file)."""
    path = folder / PREPROCESSOR_CONFIG
    if not path.is_file():
        raise ValueError(f"{folder}: no {PREPROCESSOR_CONFIG} ({why})")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable as JSON ({exc})") from None
    default = VisionSettings()
    size = dict(
        config.get("size") or {"shortest_edge": default.min_pixels, "longest_edge": default.max_pixels}
    )
    if config.get("min_pixels") is not None:
        size["shortest_edge"] = config["min_pixels"]
    if config.get("max_pixels") is not None:
        size["longest_edge"] = config["max_pixels"]
    if not size.get("shortest_edge") or not size.get("longest_edge"):
        raise ValueError(
            f"{path}: 'size' needs 'shortest_edge' and 'longest_edge' (pixel counts), got {size}"
        )
    return VisionSettings(
        patch_size=int(config.get("patch_size", default.patch_size)),
        merge_size=int(config.get("merge_size", default.merge_size)),
        temporal_patch_size=int(config.get("temporal_patch_size", default.temporal_patch_size)),
        min_pixels=int(size["shortest_edge"]),
        max_pixels=int(size["longest_edge"]),
        do_resize=bool(config.get("do_resize", True)),
    )


# Copied from transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize
def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56, max_pixels: int = 14 * 14 * 4 * 1280
) -> tuple[int, int]:
    """The (height, width) Qwen2-VL's processor resizes a picture to: sides multiples of `factor`, the area
    within [min_pixels, max_pixels], the aspect kept as closely as that allows."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def picture_grid(settings: VisionSettings, width: int, height: int) -> tuple[int, int, int]:
    """A `width` x `height` picture's `image_grid_thw` row: one temporal patch (a still picture is repeated
    to fill it), the resized sides in patches. Its patches are the product; its `<|image_pad|>` tokens the
    product over `merge_size` squared."""
    if min(width, height) < 1:  # smart_resize would divide by zero
        raise ValueError(f"a {width} x {height} picture has no pixels for the vision encoder")
    if settings.do_resize:
        factor = settings.patch_size * settings.merge_size
        height, width = smart_resize(height, width, factor, settings.min_pixels, settings.max_pixels)
    return 1, height // settings.patch_size, width // settings.patch_size


@dataclass(frozen=True)
class TokenCounter:
    """A text's token count as the folder's transformers tokenizer encodes it (`encode(text, special)`: the
    ids, `special` as transformers' `add_special_tokens`)."""

    encode: Callable[[str, bool], list[int]]

    def count(self, text: str, *, special_tokens: bool = True) -> int:
        return len(self.encode(text, special_tokens))


def token_counter(folder: Path) -> TokenCounter:
    """`folder`'s tokenizer.json read by the tokenizers library; without one, transformers' tokenizer from
    `folder` (slow: it imports transformers, but counts the same)."""
    path = folder / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
        return TokenCounter(lambda text, special: tokenizer.encode(text, add_special_tokens=special).ids)
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return TokenCounter(lambda text, special: loaded(text, add_special_tokens=special)["input_ids"])
