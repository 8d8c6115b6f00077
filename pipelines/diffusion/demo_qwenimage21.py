"""The tiny Qwen-Image 2.1 demo models (`demo:tiny-qwenimage21`, `demo:tiny-qwenimage21-turbo`): random
weights, fixed seeds, built offline.

Lives here: `build_tiny_qwenimage21`, `build_tiny_qwenimage21_turbo`, `tiny_qwenimage21_tokenizer`,
`tiny_qwen3vl_image_processor`, `qwen3vl_processor`, `TINY_QWENIMAGE21`, `TINY_QWENIMAGE21_VAE`,
`CHAT_TEMPLATE`. May import: stdlib, torch, transformers, diffusers, pipelines.diffusion.demo_zimage
(the tiny byte-level BPE and its Qwen2 tokenizer form), pipelines.diffusion.families_qwen21 (Turbo's grid).

Qwen-Image 2.1 (`QwenImage21Pipeline`): a Qwen3-VL text encoder (`Qwen3VLForConditionalGeneration`) behind a
`processor/` (Qwen3-VL's image processor, 16 px patches merged 2x2, and the tokenizer), the single-stream
block-causal `QwenImage21Transformer2DModel` over unpacked latents, and `AutoencoderKLQwenImage21` (RGBA in and
out). Turbo is the same classes with `sample_sigmas` in model_index.json (the shipped 8-step grid).
Shaped like diffusers' own test components (tests/pipelines/qwenimage21): the pipeline hard-codes 16 pixels
per latent, so the VAE keeps its four 2x downsamplings; sizes elsewhere are odd on purpose (8 latent
channels, a 16-wide Qwen3-VL, a 2-block transformer). The VAE's mean/std are not 0/1, so their use is tested.

transformers' `Qwen3VLProcessor` wants a video processor whose class needs torchvision (not installable here:
FINDINGS.md); `qwen3vl_processor` builds the real class without one, as `demo_qwenimage_edit` does for
Qwen2-VL, and saves what a real `processor/` holds for pictures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import torch
from diffusers import (
    AutoencoderKLQwenImage21,
    FlowMatchEulerDiscreteScheduler,
    QwenImage21Pipeline,
    QwenImage21Transformer2DModel,
)
from transformers import (
    ProcessorMixin,
    Qwen2Tokenizer,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from pipelines.diffusion.demo_zimage import qwen2_tokenizer, train_byte_bpe
from pipelines.diffusion.families_qwen21 import TURBO_SIGMAS

# The pipeline's system turn (whole-word tokens, as Qwen's vocabulary has them) and words demo prompts use.
_CORPUS = (
    "system\nComprehend and analyze the provided prompt.\nuser\nassistant\n <image1> <image2> <image3> a "
    "small large yellow red green blue white black triangle square circle on in with photo painting cat dog "
    "house tree sky background high quality detailed blurry bad make the"
)
_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Qwen3-VL's chat template reduced to what the pipeline renders: the system turn it counts the tokens of.
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- else %}"
    "{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TINY_QWENIMAGE21 = dict(
    patch_size=1,
    in_channels=8,  # the VAE's z_dim: 2.1 takes latents unpacked
    out_channels=8,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    context_in_dim=16,  # the Qwen3-VL width
    mlp_ratio=2,
    axes_dims_rope=(4, 6, 6),
)
TINY_QWENIMAGE21_VAE = dict(
    base_dim=4,
    decoder_base_dim=4,
    z_dim=8,
    dim_mult=[1, 1, 1, 1, 1],  # four spatial downsamplings: the 16 pixels per latent the pipeline assumes
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True, True],
    latents_mean=[0.1, -0.2, 0.3, 0.0, 0.05, -0.1, 0.2, -0.3],
    latents_std=[1.5, 0.8, 1.2, 2.0, 1.1, 0.9, 1.3, 0.7],
)
_TINY_QWEN3_VL = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]},
)
# One merged vision token covers 32 px: the 2x2 group of latents each image slot stands for.
_TINY_VISION = dict(
    depth=2,
    hidden_size=16,
    intermediate_size=16,
    num_heads=2,
    out_hidden_size=16,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=64,
    deepstack_visual_indexes=[0],
)
# The scheduler shape of the released folders: a resolution-dependent exponential shift.
_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
    time_shift_type="exponential",
)


def tiny_qwenimage21_tokenizer() -> Qwen2Tokenizer:
    """A byte-level BPE over the demo corpus, as a Qwen2 tokenizer with Qwen3-VL's special tokens."""
    tokenizer = qwen2_tokenizer(train_byte_bpe(_CORPUS, 600, _SPECIAL), _SPECIAL, 4096)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen3vl_image_processor() -> Qwen2VLImageProcessorPil:
    """Qwen3-VL's image processor settings (16 px patches, 2x2 merge, 2 frames a patch, mean/std 0.5)."""
    return Qwen2VLImageProcessorPil(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=32 * 32,
        max_pixels=1024 * 1024,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )


def qwen3vl_processor(image_processor: Any, tokenizer: Any) -> Qwen3VLProcessor:
    """transformers' `Qwen3VLProcessor` without a video processor (see the module docstring)."""
    check = ProcessorMixin.check_argument_for_proper_class

    def skip_missing_video(self: ProcessorMixin, name: str, argument: Any) -> Any:
        if name == "video_processor" and argument is None:
            return None
        return check(self, name, argument)

    with mock.patch.object(ProcessorMixin, "check_argument_for_proper_class", skip_missing_video):
        processor = Qwen3VLProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=tokenizer.chat_template,
        )

    def save(directory: str | Path, **_: Any) -> None:
        # What a real folder's processor/ holds for pictures; the missing video processor cannot be saved.
        image_processor.save_pretrained(str(directory))
        tokenizer.save_pretrained(str(directory))

    processor.save_pretrained = save  # type: ignore[method-assign]
    return processor


def tiny_qwen3vl(tokenizer: Qwen2Tokenizer) -> Qwen3VLForConditionalGeneration:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in _SPECIAL}
    config = Qwen3VLConfig(
        text_config={**_TINY_QWEN3_VL, "vocab_size": len(tokenizer)},
        vision_config=_TINY_VISION,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(0)
    return Qwen3VLForConditionalGeneration(config).eval()


def _build(sample_sigmas: tuple[float, ...] | None) -> QwenImage21Pipeline:
    torch.manual_seed(0)
    transformer = QwenImage21Transformer2DModel(**TINY_QWENIMAGE21)
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage21(**TINY_QWENIMAGE21_VAE)
    tokenizer = tiny_qwenimage21_tokenizer()
    return QwenImage21Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_SCHEDULER),
        vae=vae,
        text_encoder=tiny_qwen3vl(tokenizer),
        processor=qwen3vl_processor(tiny_qwen3vl_image_processor(), tokenizer),
        transformer=transformer,
        sample_sigmas=list(sample_sigmas) if sample_sigmas else None,
    )


def build_tiny_qwenimage21() -> QwenImage21Pipeline:
    """Qwen-Image 2.1's shape: sigmas 1 -> 1/steps, true CFG with a negative prompt."""
    return _build(None)


def build_tiny_qwenimage21_turbo() -> QwenImage21Pipeline:
    """Qwen-Image 2.1 Turbo's shape: the shipped 8-step `sample_sigmas`, run without guidance."""
    return _build(TURBO_SIGMAS)
