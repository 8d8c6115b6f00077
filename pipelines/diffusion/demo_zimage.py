"""The tiny Z-Image demo model (`demo:tiny-zimage`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_zimage`, `tiny_qwen_tokenizer`, `train_byte_bpe` and `qwen2_tokenizer` (shared by the
Qwen-Image and FLUX.2 demos), `TINY_ZIMAGE`, `TINY_ZIMAGE_VAE`, `TINY_QWEN3`,
`QWEN_CHAT_TEMPLATE`. May import: stdlib, torch, tokenizers, transformers, diffusers.

Shaped like diffusers' own Z-Image test components, with sizes chosen to catch hard-coded assumptions: a
3-block VAE (4 pixels per latent, not 8), a 16-wide Qwen3 of 2 layers, a 2-layer transformer. The tokenizer
is a byte-level BPE trained here with `tokenizers` and saved with a Qwen-style chat template, so the pipeline
and our encoder both read the folder's own tokenizer and template (`apply_chat_template(...,
enable_thinking=True)`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen2Tokenizer, Qwen3Config, Qwen3Model

# Words a demo prompt is likely to use get whole-word tokens; every byte has a token too (no unknowns).
_CORPUS = (
    "a small large yellow red green blue white black triangle square circle on the in of with and "
    "background photo painting cat dog house tree sky high quality detailed blurry bad user assistant"
)
_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen3's chat layout, cut to one-turn messages: what ZImagePipeline's `apply_chat_template` call renders.
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)

# head dim 32 / 2 heads = 16 = the rotary axes (8, 4, 4); cap_feat_dim = the Qwen3 width.
TINY_ZIMAGE = dict(
    all_patch_size=(2,),
    all_f_patch_size=(1,),
    in_channels=16,
    dim=32,
    n_layers=2,
    n_refiner_layers=1,
    n_heads=2,
    n_kv_heads=2,
    norm_eps=1e-5,
    qk_norm=True,
    cap_feat_dim=16,
    rope_theta=256.0,
    t_scale=1000.0,
    axes_dims=[8, 4, 4],
    # Caption positions as the released model's 1536 (rotary tables only, no weights): a template's long
    # prompt (hundreds of tokens from the tiny byte-level tokenizer) then fits as it does on the real model.
    axes_lens=[1536, 32, 32],
)
# Flux's VAE layout (16 latent channels, no quant convs, shift + scale) with 3 blocks: 4 pixels per latent.
TINY_ZIMAGE_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 3,
    up_block_types=["UpDecoderBlock2D"] * 3,
    block_out_channels=[8, 16, 16],
    layers_per_block=1,
    latent_channels=16,
    norm_num_groups=4,
    sample_size=32,
    scaling_factor=0.3611,
    shift_factor=0.1159,
    use_quant_conv=False,
    use_post_quant_conv=False,
)
TINY_QWEN3 = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=512,
)
# Z-Image-Turbo's scheduler: a fixed shift of 3, no resolution-dependent shift.
_ZIMAGE_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False)


def train_byte_bpe(corpus: str, vocab_size: int, special: Sequence[str]) -> Tokenizer:
    """A byte-level BPE trained offline on `corpus` (every byte in the alphabet, so nothing maps to unk): the
    tiny LLM-style tokenizers of the newer families' demo models all start here."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([corpus] * 4, trainer=trainer)
    return bpe


def qwen2_tokenizer(bpe: Tokenizer, special: Sequence[str], model_max_length: int) -> Qwen2Tokenizer:
    """`bpe`'s vocabulary and merges as a Qwen2 tokenizer; `special[0]` is its end-of-text token."""
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return Qwen2Tokenizer(
        vocab=dict(model["vocab"]),
        merges=merges,
        extra_special_tokens=list(special[1:]),
        model_max_length=model_max_length,
    )


def tiny_qwen_tokenizer() -> Qwen2Tokenizer:
    """A byte-level BPE over the demo corpus, as a Qwen2 tokenizer with the chat template set."""
    tokenizer = qwen2_tokenizer(train_byte_bpe(_CORPUS, 400, _SPECIAL), _SPECIAL, 512)
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def build_tiny_zimage() -> ZImagePipeline:
    torch.manual_seed(0)
    transformer = ZImageTransformer2DModel(**TINY_ZIMAGE)
    # The pad tokens may start uninitialised (`torch.empty` in some diffusers versions): fix them, as
    # diffusers' own tests do, so the saved folder never holds NaNs.
    with torch.no_grad():
        transformer.x_pad_token.copy_(torch.ones_like(transformer.x_pad_token))
        transformer.cap_pad_token.copy_(torch.ones_like(transformer.cap_pad_token))
    torch.manual_seed(0)
    vae = AutoencoderKL(**TINY_ZIMAGE_VAE)
    torch.manual_seed(0)
    tokenizer = tiny_qwen_tokenizer()
    text_encoder = Qwen3Model(Qwen3Config(vocab_size=len(tokenizer), **TINY_QWEN3))
    return ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_ZIMAGE_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
