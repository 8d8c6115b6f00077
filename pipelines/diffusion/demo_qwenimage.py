"""The tiny Qwen-Image demo model (`demo:tiny-qwenimage`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_qwenimage`, `tiny_qwenimage_tokenizer`, `tiny_qwen25_vl`, `TINY_QWENIMAGE`, `TINY_QWENIMAGE_VAE`,
`TINY_QWEN25_VL`. May import: stdlib, torch, tokenizers, transformers, diffusers, pipelines.diffusion.demo_zimage
(the tiny byte-level BPE and its Qwen2 tokenizer form).

Shaped like diffusers' own Qwen-Image test components (tests/pipelines/qwenimage), with sizes chosen to catch
hard-coded assumptions: a VAE with 4 latent channels and 2 downsamplings (4 pixels per latent, not 8), a
16-wide Qwen2.5-VL of 2 layers, a 2-layer transformer of 3 heads. The tokenizer is a byte-level BPE trained
here with `tokenizers` on the pipeline's own system prompt, so its prefix splits into the same 34 tokens as
Qwen's tokenizer does (QwenImagePipeline drops exactly 34) and the prompt's tokens are what stays.
"""

from __future__ import annotations

import torch
from diffusers import (
    AutoencoderKLQwenImage,
    FlowMatchEulerDiscreteScheduler,
    QwenImagePipeline,
    QwenImageTransformer2DModel,
)
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

from pipelines.diffusion.demo_zimage import qwen2_tokenizer, train_byte_bpe

# The pipeline's system prompt (whole-word tokens, as in Qwen's vocabulary) and words demo prompts use.
_CORPUS = (
    "system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:\nuser\nassistant\n a small large yellow red green blue white black "
    "triangle square circle on in with photo painting cat dog house tree sky high quality detailed blurry bad"
)
_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
)

TINY_QWENIMAGE = dict(
    patch_size=2,
    in_channels=16,  # 4 latent channels x a 2x2 patch, packed by the pipeline
    out_channels=4,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=3,
    joint_attention_dim=16,  # the Qwen2.5-VL width
    guidance_embeds=False,
    axes_dims_rope=(8, 4, 4),
)
TINY_QWENIMAGE_VAE = dict(
    base_dim=24,
    z_dim=4,
    dim_mult=[1, 2, 4],
    num_res_blocks=1,
    temperal_downsample=[False, True],  # 2 spatial downsamplings: 4 pixels per latent
    latents_mean=[0.1, -0.2, 0.3, 0.0],
    latents_std=[1.5, 0.8, 1.2, 2.0],
)
TINY_QWEN25_VL = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
    rope_theta=1000000.0,
)
_TINY_VISION = dict(depth=2, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16)
# Qwen-Image's scheduler: resolution-dependent shift, exponential time shift (its published config).
_QWENIMAGE_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    base_image_seq_len=256,
    max_image_seq_len=8192,
    time_shift_type="exponential",
    shift_terminal=0.02,
)


def tiny_qwenimage_tokenizer() -> Qwen2Tokenizer:
    """A byte-level BPE over the demo corpus, as a Qwen2 tokenizer with Qwen2-VL's special tokens."""
    return qwen2_tokenizer(train_byte_bpe(_CORPUS, 600, _SPECIAL), _SPECIAL, 2048)


def tiny_qwen25_vl(tokenizer: Qwen2Tokenizer) -> Qwen2_5_VLForConditionalGeneration:
    """The tiny Qwen2.5-VL (text and vision tower) for `tokenizer`'s vocabulary and special tokens, seed 0."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in _SPECIAL}
    config = Qwen2_5_VLConfig(
        text_config={
            **TINY_QWEN25_VL,
            "vocab_size": len(tokenizer),
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config=_TINY_VISION,
        hidden_size=16,
        vocab_size=len(tokenizer),
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        vision_token_id=ids["<|image_pad|>"],
        image_token_id=ids["<|image_pad|>"],
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def build_tiny_qwenimage() -> QwenImagePipeline:
    torch.manual_seed(0)
    transformer = QwenImageTransformer2DModel(**TINY_QWENIMAGE)
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage(**TINY_QWENIMAGE_VAE)
    tokenizer = tiny_qwenimage_tokenizer()
    return QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_QWENIMAGE_SCHEDULER),
        vae=vae,
        text_encoder=tiny_qwen25_vl(tokenizer),
        tokenizer=tokenizer,
        transformer=transformer,
    )
