"""The tiny FLUX.2 [klein] demo model (`demo:tiny-flux2-klein`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_flux2_klein`, `build_tiny_flux2_dev`, `TINY_FLUX2`, `TINY_FLUX2_VAE`,
`TINY_KLEIN_QWEN3`, `TINY_DEV_MISTRAL3`, `MISTRAL_CHAT_TEMPLATE`. May import: stdlib,
torch, transformers, diffusers, pipelines.diffusion.demo_zimage (the offline Qwen tokenizer).

Shaped like diffusers' own Flux2Klein test components, with sizes chosen to catch hard-coded assumptions: a
3-block VAE (4 pixels per latent, not 8) with 8 latent channels (not 32), so the transformer takes 8 x 2 x 2
= 32 channels (not 128); the VAE's batch-norm statistics are set away from 0 and 1, so a decode that skips
them shows. The Qwen3 has 28 layers (16 wide): the pipeline stacks hidden layers 9, 18 and 27, so the
transformer's `joint_attention_dim` is 3 x 16. The tokenizer is the Z-Image demo's byte-level BPE with the
Qwen chat template (the pipeline renders it with `enable_thinking=False`). It is the base (undistilled)
Klein: `is_distilled` false, so `guidance_scale` > 1 runs true classifier-free guidance.

`demo:tiny-flux2-dev` (`Flux2Pipeline`) shares the VAE and a transformer with the guidance embedding; its text
encoder is a Mistral3 of 31 text layers (the pipeline reads hidden layers 10, 20, 30) with a one-layer Pixtral
vision tower, and a byte-level BPE tokenizer saved with a Mistral-style chat template (system prompt in
[SYSTEM_PROMPT], the user turn in [INST]). Real [dev] folders ship a `PixtralProcessor` as the tokenizer
(which needs torchvision); the demo ships the plain tokenizer, which `Flux2Pipeline` loads as its tokenizer.
"""

from __future__ import annotations

import torch
from diffusers import (
    AutoencoderKLFlux2,
    FlowMatchEulerDiscreteScheduler,
    Flux2KleinPipeline,
    Flux2Pipeline,
    Flux2Transformer2DModel,
)
from transformers import (
    Mistral3Config,
    Mistral3ForConditionalGeneration,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from pipelines.diffusion.demo_zimage import tiny_qwen_tokenizer, train_byte_bpe

TINY_KLEIN_QWEN3 = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=28,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=1024,
)
TINY_FLUX2 = dict(
    patch_size=1,
    in_channels=32,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=3 * 16,  # three stacked Qwen3 hidden layers
    timestep_guidance_channels=256,
    axes_dims_rope=[4, 4, 4, 4],
    guidance_embeds=False,
)
TINY_FLUX2_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 3,
    up_block_types=["UpDecoderBlock2D"] * 3,
    block_out_channels=[8, 16, 16],
    layers_per_block=1,
    latent_channels=8,
    norm_num_groups=4,
    sample_size=32,
    use_quant_conv=True,
    use_post_quant_conv=True,
)
# FLUX.2 [klein]'s scheduler: the resolution- and step-dependent shift (`compute_empirical_mu`) is on.
_KLEIN_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
    time_shift_type="exponential",
)


def build_tiny_flux2_klein() -> Flux2KleinPipeline:
    torch.manual_seed(0)
    transformer = Flux2Transformer2DModel(**TINY_FLUX2)
    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(**TINY_FLUX2_VAE)
    with torch.no_grad():  # statistics as a trained VAE has them: neither 0 nor 1
        vae.bn.running_mean.copy_(torch.randn_like(vae.bn.running_mean) * 0.2)
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    torch.manual_seed(0)
    tokenizer = tiny_qwen_tokenizer()
    text_encoder = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tokenizer), **TINY_KLEIN_QWEN3))
    return Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_KLEIN_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=False,
    )


_MISTRAL_SPECIAL = (
    "<unk>",
    "<s>",
    "</s>",
    "<pad>",
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[IMG]",
)
# Mistral Small 3.1's layout, cut to text parts: what Flux2Pipeline's `apply_chat_template` call renders.
MISTRAL_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set text = message['content'] %}"
    "{%- else %}{%- set text = message['content'][0]['text'] %}{%- endif %}"
    "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + text + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{- '[INST]' + text + '[/INST]' }}"
    "{%- else %}{{- text + eos_token }}{%- endif %}{%- endfor %}"
)
TINY_DEV_MISTRAL3 = dict(
    text_config=dict(
        model_type="mistral",
        hidden_size=16,
        intermediate_size=16,
        max_position_embeddings=1024,
        num_attention_heads=2,
        num_hidden_layers=31,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=None,
    ),
    vision_config=dict(
        model_type="pixtral",
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        image_size=30,
        patch_size=6,
        num_channels=3,
    ),
    image_token_index=8,  # "[IMG]"
)
_DEV_CORPUS = (
    "a small large yellow red green blue white black triangle square circle on the in of with and "
    "background photo You are an AI that reasons about image descriptions give structured responses"
)


def tiny_mistral_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_byte_bpe(_DEV_CORPUS, 400, _MISTRAL_SPECIAL),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=1024,
    )
    tokenizer.chat_template = MISTRAL_CHAT_TEMPLATE
    return tokenizer


def build_tiny_flux2_dev() -> Flux2Pipeline:
    torch.manual_seed(0)
    transformer = Flux2Transformer2DModel(**{**TINY_FLUX2, "guidance_embeds": True})
    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(**TINY_FLUX2_VAE)
    with torch.no_grad():  # statistics as a trained VAE has them: neither 0 nor 1
        vae.bn.running_mean.copy_(torch.randn_like(vae.bn.running_mean) * 0.2)
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    torch.manual_seed(0)
    tokenizer = tiny_mistral_tokenizer()
    config = Mistral3Config(
        **{
            **TINY_DEV_MISTRAL3,
            "text_config": {**TINY_DEV_MISTRAL3["text_config"], "vocab_size": len(tokenizer)},
        }
    )
    text_encoder = Mistral3ForConditionalGeneration(config)
    return Flux2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**_KLEIN_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
