"""The tiny Krea 2 demo models (`demo:tiny-krea2`, `demo:tiny-krea2-turbo`): random weights, fixed seeds,
built offline.

Lives here: `build_tiny_krea2`, `build_tiny_krea2_turbo`, `TINY_KREA2`, `TINY_QWEN3_VL`. May import: stdlib,
torch, transformers, diffusers, pipelines.diffusion.demo_qwenimage (the tiny Qwen-Image VAE and tokenizer,
which Krea 2 shares: its prompt template is Qwen-Image's, so the same 34 system-turn tokens are dropped).

Krea 2 (`Krea2Pipeline`): a Qwen3-VL text encoder tapped at several layers (stacked per token), a
single-stream MMDiT (`Krea2Transformer2DModel`) with its own text-fusion blocks, Qwen-Image's VAE. Turbo is
the same classes with `is_distilled` in model_index.json (a fixed shift, few steps, usually no guidance).
Sizes chosen to catch hard-coded assumptions: Qwen-Image's tiny VAE (4 latent channels, 4 pixels per latent),
a 16-wide Qwen3-VL of 3 layers tapped at layers 1 and 3 (not Krea 2's twelve), 2 transformer blocks.
"""

from __future__ import annotations

import torch
from diffusers import (
    AutoencoderKLQwenImage,
    FlowMatchEulerDiscreteScheduler,
    Krea2Pipeline,
    Krea2Transformer2DModel,
)
from transformers import Qwen3VLConfig, Qwen3VLModel

from pipelines.diffusion.demo_qwenimage import TINY_QWENIMAGE_VAE, tiny_qwenimage_tokenizer

TINY_KREA2 = dict(
    in_channels=16,  # 4 latent channels x a 2x2 patch
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=3,
    num_key_value_heads=1,
    intermediate_size=32,
    timestep_embed_dim=16,
    text_hidden_dim=16,  # the Qwen3-VL width
    num_text_layers=2,  # the taps below
    text_num_attention_heads=2,
    text_num_key_value_heads=2,
    text_intermediate_size=24,
    num_layerwise_text_blocks=1,
    num_refiner_text_blocks=1,
    axes_dims_rope=(4, 6, 6),
)
TINY_QWEN3_VL = dict(
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    rope_parameters={"rope_theta": 1000000.0, "rope_type": "default", "mrope_section": [1, 1, 2]},
)
_TINY_VISION = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16)
_TAPS = (1, 3)  # hidden_states indices (0 is the embeddings): the pipeline's text_encoder_select_layers
# Krea 2's scheduler: resolution-dependent shift up to 6400 image tokens, exponential time shift.
_KREA2_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=6400,
    time_shift_type="exponential",
)


def _build(is_distilled: bool) -> Krea2Pipeline:
    torch.manual_seed(0)
    transformer = Krea2Transformer2DModel(**TINY_KREA2)
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage(**TINY_QWENIMAGE_VAE)
    tokenizer = tiny_qwenimage_tokenizer()
    ids = {
        t: tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
    }
    config = Qwen3VLConfig(
        text_config={**TINY_QWEN3_VL, "vocab_size": len(tokenizer)},
        vision_config=_TINY_VISION,
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        image_token_id=ids["<|image_pad|>"],
        # Qwen3-VL-4B (the released encoder) ties its head to the embedding; Qwen3VLModel has no head, so this
        # changes no weight, only what the file says to Load LLM (pipelines.llm.comfy_te generates with it).
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    text_encoder = Qwen3VLModel(config).eval()
    return Krea2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_KREA2_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        text_encoder_select_layers=_TAPS,
        is_distilled=is_distilled,
    )


def build_tiny_krea2() -> Krea2Pipeline:
    """Krea 2's base shape: the shift follows the image's token count."""
    return _build(is_distilled=False)


def build_tiny_krea2_turbo() -> Krea2Pipeline:
    """Krea 2 Turbo's shape: `is_distilled`, a fixed shift (mu 1.15)."""
    return _build(is_distilled=True)
