"""The tiny LTX-2 demo model (`demo:tiny-ltx2`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_ltx2`, `tiny_gemma_tokenizer`, `TINY_LTX2`, `TINY_LTX2_VAE`, `TINY_LTX2_AUDIO_VAE`,
`TINY_LTX2_VOCODER`, `TINY_LTX2_CONNECTORS`, `TINY_GEMMA3`. May import: stdlib, torch, transformers,
diffusers.

Shaped like diffusers' own LTX-2 test components (tests/pipelines/ltx2/test_ltx2.py `get_dummy_components`),
except that nothing comes from the hub: the Gemma 3 text encoder is built from a config here (2 text layers,
a 2-layer SigLIP vision tower it never runs for text) and the tokenizer is a character-level `GemmaTokenizer`
(every printable ASCII character and the word marker `▁` in the vocabulary, Gemma's special-token ids 0-4,
`<bos>` first), so no prompt maps to unk. The video VAE is two stages, 4x in space and time (not LTX-2's 32x
and 8x, so nothing assumes those), the audio VAE and vocoder are the test's, and the scheduler is
FlowMatchEulerDiscreteScheduler with LTX-2's dynamic-shift settings.
"""

from __future__ import annotations

import string

import torch
from diffusers import (
    AutoencoderKLLTX2Audio,
    AutoencoderKLLTX2Video,
    FlowMatchEulerDiscreteScheduler,
    LTX2Pipeline,
    LTX2VideoTransformer3DModel,
)
from diffusers.pipelines.ltx2 import LTX2TextConnectors
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
from transformers import Gemma3Config, Gemma3ForConditionalGeneration, GemmaTokenizer

_SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")  # Gemma's ids 0-4

TINY_GEMMA3 = dict(
    text_config=dict(
        vocab_size=128,
        hidden_size=32,  # the connectors' width (4 heads x 8)
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=1024,
        sliding_window=64,
    ),
    vision_config=dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    ),
    mm_tokens_per_image=4,
)
TINY_LTX2 = dict(
    in_channels=4,
    out_channels=4,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=2,
    attention_head_dim=8,
    cross_attention_dim=16,
    audio_in_channels=4,
    audio_out_channels=4,
    audio_num_attention_heads=2,
    audio_attention_head_dim=4,
    audio_cross_attention_dim=8,
    num_layers=3,  # three, so that streaming (a window of two blocks) holds less than the whole
    qk_norm="rms_norm_across_heads",
    caption_channels=32,  # the Gemma width
    rope_double_precision=False,
    rope_type="split",
)
TINY_LTX2_CONNECTORS = dict(
    caption_channels=32,
    text_proj_in_factor=3,  # Gemma's 2 layers + the embeddings: every hidden state is stacked
    video_connector_num_attention_heads=4,
    video_connector_attention_head_dim=8,
    video_connector_num_layers=1,
    video_connector_num_learnable_registers=None,
    audio_connector_num_attention_heads=4,
    audio_connector_attention_head_dim=8,
    audio_connector_num_layers=1,
    audio_connector_num_learnable_registers=None,
    connector_rope_base_seq_len=32,
    rope_theta=10000.0,
    rope_double_precision=False,
    causal_temporal_positioning=False,
    rope_type="split",
)
# Two stages, each 2x in space and time: 4 pixels and 4 frames per latent (not LTX-2's 32 and 8).
TINY_LTX2_VAE = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    block_out_channels=(8, 8),
    decoder_block_out_channels=(8, 8),
    layers_per_block=(1, 1),
    decoder_layers_per_block=(1, 1, 1),
    spatio_temporal_scaling=(True, True),
    decoder_spatio_temporal_scaling=(True, True),
    decoder_inject_noise=(False, False, False),
    downsample_type=("spatiotemporal", "spatiotemporal"),
    upsample_residual=(False, False),
    upsample_factor=(1, 1),
    timestep_conditioning=False,
    patch_size=1,
    patch_size_t=1,
    encoder_causal=True,
    decoder_causal=False,
)
TINY_LTX2_AUDIO_VAE = dict(
    base_channels=4,
    output_channels=2,
    ch_mult=(1,),
    num_res_blocks=1,
    attn_resolutions=None,
    in_channels=2,
    resolution=32,
    latent_channels=2,
    norm_type="pixel",
    causality_axis="height",
    dropout=0.0,
    mid_block_add_attention=False,
    sample_rate=16000,
    mel_hop_length=160,
    is_causal=True,
    mel_bins=8,
)
TINY_LTX2_VOCODER = dict(
    in_channels=2 * 8,  # the audio VAE's output channels x mel bins
    hidden_channels=32,
    out_channels=2,
    upsample_kernel_sizes=[4, 4],
    upsample_factors=[2, 2],
    resnet_kernel_sizes=[3],
    resnet_dilations=[[1, 3, 5]],
    leaky_relu_negative_slope=0.1,
    output_sampling_rate=16000,
)
# LTX-2's scheduler_config.json (dynamic shift from the video token count, exponential time shift).
_LTX2_SCHEDULER = dict(
    use_dynamic_shifting=True,
    base_image_seq_len=1024,
    max_image_seq_len=4096,
    base_shift=0.95,
    max_shift=2.05,
    shift_terminal=0.1,
    time_shift_type="exponential",
)


def tiny_gemma_tokenizer() -> GemmaTokenizer:
    """Gemma's tokenizer class over a character vocabulary (no merges): each character is a token."""
    chars = ("▁", *(c for c in string.printable if c.strip()))
    vocab = {tok: i for i, tok in enumerate((*_SPECIAL, *chars))}
    return GemmaTokenizer(vocab=vocab, merges=[], add_bos_token=True, model_max_length=1024)


def build_tiny_ltx2() -> LTX2Pipeline:
    torch.manual_seed(0)
    text_encoder = Gemma3ForConditionalGeneration(Gemma3Config(**TINY_GEMMA3))
    torch.manual_seed(0)
    transformer = LTX2VideoTransformer3DModel(**TINY_LTX2)
    torch.manual_seed(0)
    connectors = LTX2TextConnectors(**TINY_LTX2_CONNECTORS)
    torch.manual_seed(0)
    vae = AutoencoderKLLTX2Video(**TINY_LTX2_VAE)
    torch.manual_seed(0)
    audio_vae = AutoencoderKLLTX2Audio(**TINY_LTX2_AUDIO_VAE)
    torch.manual_seed(0)
    vocoder = LTX2Vocoder(**TINY_LTX2_VOCODER)
    return LTX2Pipeline(
        transformer=transformer,
        vae=vae,
        audio_vae=audio_vae,
        scheduler=FlowMatchEulerDiscreteScheduler(**_LTX2_SCHEDULER),
        text_encoder=text_encoder,
        tokenizer=tiny_gemma_tokenizer(),
        connectors=connectors,
        vocoder=vocoder,
    )
