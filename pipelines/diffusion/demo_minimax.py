"""The tiny MiniMax H3 demo model (`demo:tiny-minimax`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_minimax`, `TinyMiniMaxH3`, `tiny_minimax_tokenizer`, `TINY_MINIMAX`,
`TINY_MINIMAX_VAE`, `TINY_MINIMAX_AUDIO_VAE`, `TINY_QWEN3VL_TEXT`, `MINIMAX_SPECIAL`.
May import: stdlib, torch, tokenizers, transformers, diffusers, pipelines.diffusion.demo_zimage (the BPE helpers).

MiniMax H3 is modular only in diffusers (`MiniMaxH3ModularPipeline`), so there is no `DiffusionPipeline` to
save: `TinyMiniMaxH3` holds the components and writes them as a diffusers folder (one subfolder each, a
`model_index.json` naming `MiniMaxH3ModularPipeline` and the component classes). Sizes are chosen to catch
hard-coded assumptions: a video VAE that is 8x in space (H3's own is 16x: the canvas multiple becomes 16,
not 32), 8 latent channels (not 24), an audio VAE with 8 latent channels (not 32) and a 200-sample hop at
8 kHz (not 800 at 32 kHz). The Qwen3-VL text encoder has 51 tiny layers because the pipeline reads
`hidden_states[50]` and refuses a shallower stack. The processor subfolder holds the image processor's config
only (Qwen3-VL's video processor needs torchvision, which is not installed here). `transformer_ref` is the
reference-to-video (ref2va) partition: the same transformer class and sizes, seeded differently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from diffusers import (
    AutoencoderKLMiniMaxH3,
    AutoencoderKLMiniMaxH3Audio,
    MiniMaxH3Scheduler,
    MiniMaxH3Transformer3DModel,
)
from transformers import Qwen2Tokenizer, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from pipelines.diffusion.demo_zimage import qwen2_tokenizer, train_byte_bpe

_CORPUS = (
    "a small yellow square moving on a black background blurry static bad quality a robot dancing on the "
    "moon picture audio video seconds red green blue cat dog walking"
)
# Qwen's end of text first, then the chat and vision markers the presentation builds on.
MINIMAX_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
TINY_MINIMAX = dict(
    num_attention_heads=2,
    attention_head_dim=16,  # 2 x 3 axes x rope_freq_dim 2 = 12 rotated channels, 4 passed through
    hidden_size=24,
    num_layers=3,  # three, so that streaming (a window of two blocks) holds less than the whole
    num_refiner_layers=1,
    ffn_dim=32,
    in_channels=8,
    audio_in_channels=8,
    patch_size=(1, 2, 2),
    text_dim=16,  # the Qwen3-VL width
    freq_dim=16,
    time_embed_hidden_dim=24,
    time_embed_dim=12,
    rope_freq_dim=2,
)
# 8x in space (three 2x stages), 4x in time (H3's own temporal stages): 17 frames per chunk, 5 latents each.
TINY_MINIMAX_VAE = dict(
    latent_channels=8,
    block_out_channels=(8, 8, 8, 8, 8, 8),
    layers_per_block=1,
    spatial_downsample_factors=(2, 2, 2, 1, 1, 1),
    temporal_downsample_factors=(1, 2, 2, 1, 1, 1),
    norm_num_groups=4,
    decoder_num_layers=1,
    decoder_num_attention_heads=2,
    decoder_attention_head_dim=8,
    decoder_num_register_tokens=1,
    decoder_ffn_mult=1,
    latents_mean=(0.1, -0.1, 0.2, 0.0, 0.05, -0.2, 0.1, 0.0),
    latents_std=(0.9, 1.1, 0.8, 1.0, 1.2, 0.7, 1.0, 0.9),
)
TINY_MINIMAX_AUDIO_VAE = dict(
    encoder_dim=4,
    encoder_rates=(4, 5, 10),
    latent_dim=16,
    latent_channels=8,
    num_attention_heads=2,
    decoder_dim=8,
    decoder_rates=(10, 5, 4),
    decoder_kernel_sizes=(20, 9, 8),  # kernel - rate even: exactly `rate` samples out per sample in
    resblock_kernel_sizes=(3,),
    resblock_dilation_sizes=((1,),),
    sampling_rate=8000,  # 40 latents a second x the 200-sample hop (a rate AAC takes, for the mp4)
    latents_mean=[0.05] * 8,
    latents_std=[0.9] * 8,
)
TINY_QWEN3VL_TEXT = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=51,  # the pipeline reads hidden_states[50]
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=2048,
    rope_scaling={"rope_type": "default", "mrope_section": [1, 1, 2], "mrope_interleaved": True},
)
TINY_QWEN3VL_VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=16,
    num_heads=2,
    out_hidden_size=16,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    deepstack_visual_indexes=[0],
    num_position_embeddings=64,
)
# Qwen2-VL's image processor at the tiny vision tower's patch and merge sizes, small pictures only.
TINY_IMAGE_PROCESSOR = dict(
    patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=64 * 64
)
# MiniMax H3's two schedules: shift 12 for video, 3 for audio (the released scheduler configs).
VIDEO_SHIFT, AUDIO_SHIFT = 12.0, 3.0


def tiny_minimax_tokenizer() -> Qwen2Tokenizer:
    return qwen2_tokenizer(train_byte_bpe(_CORPUS, 300, MINIMAX_SPECIAL), MINIMAX_SPECIAL, 2048)


class TinyMiniMaxH3:
    """The components of a MiniMax H3 folder, saved the way a user's folder is laid out."""

    def __init__(self, components: dict[str, Any], image_processor: Any) -> None:
        self.components = components
        self.image_processor = image_processor

    def save_pretrained(self, out: str, safe_serialization: bool = True) -> None:
        root = Path(out)
        index: dict[str, Any] = {"_class_name": "MiniMaxH3ModularPipeline", "_diffusers_version": "0.42.1"}
        for name, part in self.components.items():
            kwargs = {"safe_serialization": safe_serialization} if hasattr(part, "state_dict") else {}
            part.save_pretrained(str(root / name), **kwargs)
            library = "transformers" if type(part).__module__.startswith("transformers") else "diffusers"
            index[name] = [library, type(part).__name__]
        self.image_processor.save_pretrained(str(root / "processor"))
        index["processor"] = ["transformers", "Qwen3VLProcessor"]
        (root / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def build_tiny_minimax() -> TinyMiniMaxH3:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = tiny_minimax_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in MINIMAX_SPECIAL}
    torch.manual_seed(0)
    text_encoder = Qwen3VLForConditionalGeneration(
        Qwen3VLConfig(
            text_config=dict(vocab_size=len(tokenizer), **TINY_QWEN3VL_TEXT),
            vision_config=TINY_QWEN3VL_VISION,
            image_token_id=ids["<|image_pad|>"],
            video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"],
            vision_end_token_id=ids["<|vision_end|>"],
        )
    ).eval()
    torch.manual_seed(0)
    transformer = MiniMaxH3Transformer3DModel(**TINY_MINIMAX)
    torch.manual_seed(1)  # the ref2va partition: the same class, other weights (as the release's)
    transformer_ref = MiniMaxH3Transformer3DModel(**TINY_MINIMAX)
    torch.manual_seed(0)
    vae = AutoencoderKLMiniMaxH3(**TINY_MINIMAX_VAE)
    torch.manual_seed(0)
    audio_vae = AutoencoderKLMiniMaxH3Audio(**TINY_MINIMAX_AUDIO_VAE)
    components = dict(
        transformer=transformer,
        transformer_ref=transformer_ref,
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=MiniMaxH3Scheduler(shift=VIDEO_SHIFT),
        audio_scheduler=MiniMaxH3Scheduler(shift=AUDIO_SHIFT),
    )
    return TinyMiniMaxH3(components, Qwen2VLImageProcessorPil(**TINY_IMAGE_PROCESSOR))
