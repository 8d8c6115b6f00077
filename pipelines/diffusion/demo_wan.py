"""The tiny Wan demo models (`demo:tiny-wan`, `demo:tiny-wan22`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_wan`, `build_tiny_wan22`, `tiny_umt5_tokenizer`, `TINY_WAN`, `TINY_WAN_VAE`,
`TINY_UMT5`, `WAN22_BOUNDARY_RATIO`. May import: stdlib, torch, tokenizers, transformers, diffusers.

Shaped like diffusers' own Wan test components (tests/pipelines/wan/test_wan.py), with sizes chosen to catch
hard-coded assumptions: a 3-stage Wan VAE that is 4x in space and 2x in time (not Wan's 8x and 4x; its config
says so in `scale_factor_spatial` / `scale_factor_temporal`), a 24-wide UMT5 of 2 layers, a 3-layer
transformer. The scheduler is the one real Wan folders ship (UniPC on flow sigmas with a flow shift), so
`default` runs what a user's folder would. The tokenizer is a word-level vocabulary built here with
`tokenizers`, saved as a `PreTrainedTokenizerFast` that appends `</s>` and pads with `<pad>` (id 0), as
UMT5's sentencepiece tokenizer does. `tiny-wan22` adds a second expert (`transformer_2`, other weights) and
Wan 2.2 A14B's `boundary_ratio`.
"""

from __future__ import annotations

import torch
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

_WORDS = (
    "a small large yellow red green blue white black triangle square circle moving spinning on the in of "
    "with and background video cat dog walking running tree sky high quality detailed blurry bad static"
).split()
_SPECIAL = ("<pad>", "</s>", "<unk>")  # UMT5's ids 0, 1, 2

TINY_WAN = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=12,
    in_channels=16,
    out_channels=16,
    text_dim=24,  # the UMT5 width
    freq_dim=256,
    ffn_dim=32,
    num_layers=3,  # three, so that streaming (a window of two blocks) holds less than the whole
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    rope_max_seq_len=32,
)
# Two down stages (4 pixels per latent), one of them temporal (2 frames per latent frame after the first).
TINY_WAN_VAE = dict(
    base_dim=4,
    z_dim=16,
    dim_mult=[1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[False, True],
    scale_factor_spatial=4,
    scale_factor_temporal=2,
)
TINY_UMT5 = dict(d_model=24, d_kv=12, d_ff=32, num_layers=2, num_heads=2)
# Wan 2.1 T2V 480p's scheduler settings (UniPC on flow sigmas, shift 3).
_WAN_SCHEDULER = dict(
    prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=3.0
)
WAN22_BOUNDARY_RATIO = 0.875  # Wan 2.2 T2V A14B's model_index.json


def tiny_umt5_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate((*_SPECIAL, *_WORDS))}
    word_level = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", vocab["</s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=512,
    )


def _parts() -> dict:
    torch.manual_seed(0)
    transformer = WanTransformer3DModel(**TINY_WAN)
    torch.manual_seed(0)
    vae = AutoencoderKLWan(**TINY_WAN_VAE)
    torch.manual_seed(0)
    tokenizer = tiny_umt5_tokenizer()
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), **TINY_UMT5))
    return dict(
        transformer=transformer,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=UniPCMultistepScheduler(**_WAN_SCHEDULER),
    )


def build_tiny_wan() -> WanPipeline:
    return WanPipeline(**_parts())


def build_tiny_wan22() -> WanPipeline:
    parts = _parts()
    torch.manual_seed(1)  # the low-noise expert: same shape, other weights
    low_noise = WanTransformer3DModel(**TINY_WAN)
    return WanPipeline(**parts, transformer_2=low_noise, boundary_ratio=WAN22_BOUNDARY_RATIO)
