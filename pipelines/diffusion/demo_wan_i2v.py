"""The tiny Wan image-to-video demo models (`demo:tiny-wan-i2v`, `demo:tiny-wan-flf2v`, `demo:tiny-wan22-i2v`):
random weights, fixed seeds, built offline.

Lives here: `build_tiny_wan_i2v`, `build_tiny_wan_flf2v`, `build_tiny_wan22_i2v`, `TINY_WAN_I2V`, `TINY_CLIP_VISION`. May import:
stdlib, torch, transformers, diffusers, pipelines.diffusion.demo_wan.

Shaped like diffusers' own I2V test components (tests/pipelines/wan/test_wan_image_to_video.py): the text
encoder, tokenizer, VAE and scheduler are `demo:tiny-wan`'s (a VAE 4x in space and 2x in time); the transformer
takes 16 + 2 + 16 = 34 input channels (noise, the frame mask folded into the VAE's time step: 4 channels for
Wan's 4x, 2 for this VAE's 2x, and the encoded start frame). `tiny-wan-i2v` is Wan 2.1 I2V: a CLIP vision encoder (`image_encoder` + `image_processor`) whose
second-to-last hidden states the transformer cross-attends to (`image_dim`); `tiny-wan-flf2v` is Wan 2.1
FLF2V, the same with a position table over a first and a last picture's states (`pos_embed_seq_len`). `tiny-wan22-i2v` is Wan 2.2 A14B
I2V: no image encoder, two experts and Wan 2.2 I2V's `boundary_ratio` (0.9).
"""

from __future__ import annotations

import torch
from diffusers import WanImageToVideoPipeline, WanTransformer3DModel
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

from pipelines.diffusion.demo_wan import TINY_WAN, _parts

# Noise (16) + mask (`scale_factor_temporal` channels: 2 here, 4 for Wan's 36) + the encoded conditioning video (16).
TINY_WAN_I2V = dict(TINY_WAN, in_channels=16 + 2 + 16)
# 32 px, patches of 8: 16 patch tokens + the class token; width 8 (the transformer's `image_dim`).
TINY_CLIP_VISION = dict(
    hidden_size=8,
    projection_dim=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=32,
    intermediate_size=16,
    patch_size=8,
)
WAN22_I2V_BOUNDARY_RATIO = 0.9  # Wan 2.2 I2V A14B's model_index.json


def build_tiny_wan_i2v() -> WanImageToVideoPipeline:
    parts = _parts()
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(**TINY_WAN_I2V, image_dim=TINY_CLIP_VISION["hidden_size"])
    torch.manual_seed(0)
    image_encoder = CLIPVisionModel(CLIPVisionConfig(**TINY_CLIP_VISION))
    processor = CLIPImageProcessor(crop_size=32, size=32)
    return WanImageToVideoPipeline(
        **{**parts, "transformer": transformer}, image_encoder=image_encoder, image_processor=processor
    )


def build_tiny_wan_flf2v() -> WanImageToVideoPipeline:
    """Wan 2.1 FLF2V: as tiny-wan-i2v, with a learned position table over two pictures' CLIP states."""
    parts = _parts()
    torch.manual_seed(0)
    tokens = (TINY_CLIP_VISION["image_size"] // TINY_CLIP_VISION["patch_size"]) ** 2 + 1  # patches + class
    transformer = WanTransformer3DModel(
        **TINY_WAN_I2V, image_dim=TINY_CLIP_VISION["hidden_size"], pos_embed_seq_len=2 * tokens
    )
    torch.manual_seed(0)
    image_encoder = CLIPVisionModel(CLIPVisionConfig(**TINY_CLIP_VISION))
    processor = CLIPImageProcessor(crop_size=32, size=32)
    return WanImageToVideoPipeline(
        **{**parts, "transformer": transformer}, image_encoder=image_encoder, image_processor=processor
    )


def build_tiny_wan22_i2v() -> WanImageToVideoPipeline:
    parts = _parts()
    torch.manual_seed(0)
    high_noise = WanTransformer3DModel(**TINY_WAN_I2V)
    torch.manual_seed(1)  # the low-noise expert: same shape, other weights
    low_noise = WanTransformer3DModel(**TINY_WAN_I2V)
    return WanImageToVideoPipeline(
        **{**parts, "transformer": high_noise},
        transformer_2=low_noise,
        boundary_ratio=WAN22_I2V_BOUNDARY_RATIO,
    )
