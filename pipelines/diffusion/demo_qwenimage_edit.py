"""The tiny Qwen-Image-Edit demo models (`demo:tiny-qwenimage-edit`, `demo:tiny-qwenimage-edit-2511`): random
weights, fixed seeds, built offline.

Lives here: `build_tiny_qwenimage_edit`, `build_tiny_qwenimage_edit_2511`, `tiny_qwen2vl_image_processor`,
`tiny_qwenimage_edit_tokenizer`,
`qwen2vl_processor`. May import: stdlib, torch, transformers, diffusers, pipelines.diffusion.demo_qwenimage
(the tiny Qwen-Image components, which Qwen-Image-Edit shares) / demo_zimage (the tiny BPE).

Qwen-Image-Edit 2509/2511 (`QwenImageEditPlusPipeline`) is Qwen-Image's transformer, VAE and Qwen2.5-VL plus a
`processor/` folder: Qwen2-VL's image processor (patches of 14 px, 2x2 merged) and the tokenizer. 2511 differs
only in its transformer config (`zero_cond_t`: the reference pictures' tokens are modulated at timestep 0).
The tiny models reuse `demo:tiny-qwenimage`'s transformer, VAE and Qwen2.5-VL shape (its vision tower has
14 px patches, as the processor); the tokenizer is trained on the edit system turn too, so the embedding
table is sized for it.

transformers' `Qwen2VLProcessor` wants a video processor, and its video processor class needs torchvision
(not installable here: FINDINGS.md). `qwen2vl_processor` builds the real class with no video processor (the
argument's class check skipped, nothing else changed): images and text go through transformers' own code.
The folder's `processor/` holds what a real one does for pictures (preprocessor_config.json, the tokenizer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

from diffusers import QwenImageEditPlusPipeline
from transformers import ProcessorMixin, Qwen2VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from pipelines.diffusion.demo_qwenimage import (
    _CORPUS,
    _SPECIAL,
    TINY_QWENIMAGE,
    build_tiny_qwenimage,
    tiny_qwen25_vl,
)
from pipelines.diffusion.demo_zimage import qwen2_tokenizer, train_byte_bpe

# The edit pipelines' system turn (whole-word tokens, as in Qwen's vocabulary) and the picture slots' words,
# beside the Qwen-Image demo's corpus.
_EDIT_CORPUS = (
    "system\nDescribe the key features of the input image (color, shape, size, texture, objects, background), "
    "then explain how the user's text instruction should alter or modify the image. Generate a new image that "
    "meets the user's requirements while maintaining consistency with the original input where appropriate."
    "\nuser\n Picture 1: 2: 3: make the circle a yellow triangle"
)


def tiny_qwen2vl_image_processor() -> Qwen2VLImageProcessorPil:
    """Qwen2-VL's image processor with the published Qwen-Image-Edit settings (14 px patches, 2x2 merge,
    2 frames a patch, CLIP's mean/std); only the pixel range is the processor's default (it bounds how many
    patches a picture becomes, and the edit pipelines resize pictures first)."""
    return Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 1280)


def qwen2vl_processor(image_processor: Any, tokenizer: Any) -> Qwen2VLProcessor:
    """transformers' `Qwen2VLProcessor` without a video processor (see the module docstring)."""
    check = ProcessorMixin.check_argument_for_proper_class

    def skip_missing_video(self: ProcessorMixin, name: str, argument: Any) -> Any:
        if name == "video_processor" and argument is None:
            return None
        return check(self, name, argument)

    with mock.patch.object(ProcessorMixin, "check_argument_for_proper_class", skip_missing_video):
        processor = Qwen2VLProcessor(
            image_processor=image_processor, tokenizer=tokenizer, video_processor=None
        )

    def save(directory: str | Path, **_: Any) -> None:
        # What a real folder's processor/ holds for pictures; the missing video processor cannot be saved.
        image_processor.save_pretrained(str(directory))
        tokenizer.save_pretrained(str(directory))

    processor.save_pretrained = save  # type: ignore[method-assign]
    return processor


def tiny_qwenimage_edit_tokenizer() -> Any:
    """A byte-level BPE over both demo corpora: the edit system turn splits into the 64 tokens Qwen's
    tokenizer makes of it (the pipelines drop exactly 64), so the prompt's tokens are what stays."""
    return qwen2_tokenizer(train_byte_bpe(_CORPUS + " " + _EDIT_CORPUS, 600, _SPECIAL), _SPECIAL, 2048)


def _build(zero_cond_t: bool) -> QwenImageEditPlusPipeline:
    base = build_tiny_qwenimage()  # its transformer, VAE and scheduler; the text side is the edit one
    tokenizer = tiny_qwenimage_edit_tokenizer()
    transformer = base.transformer
    if zero_cond_t:
        import torch
        from diffusers import QwenImageTransformer2DModel

        torch.manual_seed(0)  # the same weights as 2509's: only the config differs
        transformer = QwenImageTransformer2DModel(**TINY_QWENIMAGE, zero_cond_t=True)
    return QwenImageEditPlusPipeline(
        scheduler=base.scheduler,
        vae=base.vae,
        text_encoder=tiny_qwen25_vl(tokenizer),
        tokenizer=tokenizer,
        processor=qwen2vl_processor(tiny_qwen2vl_image_processor(), tokenizer),
        transformer=transformer,
    )


def build_tiny_qwenimage_edit() -> QwenImageEditPlusPipeline:
    """Qwen-Image-Edit 2509's shape (`QwenImageEditPlusPipeline`, no `zero_cond_t`)."""
    return _build(zero_cond_t=False)


def build_tiny_qwenimage_edit_2511() -> QwenImageEditPlusPipeline:
    """Qwen-Image-Edit 2511's shape: 2509's plus `zero_cond_t` in the transformer config."""
    return _build(zero_cond_t=True)
