"""Tiny random-weight demo models, built offline and deterministically from configs.

Lives here: `DEMO_MODELS`, `ensure_demo_model`, `make_all_demo_models`, `build_demo_pipeline`, the tiny
configs and the in-memory tokenizers. May import: stdlib, torch, tokenizers, transformers, diffusers,
pipelines.paths, pipelines.diffusion.demo_zimage / demo_wan / demo_ltx2 (one file per newer family's tiny model).

A demo model is a real diffusers folder (`model_index.json`, safetensors, tokenizer files) with a few
thousand parameters per component, like the dummy components in diffusers' own tests: it exercises every
code path (loading, the memory manager, sampling, decoding) in well under a second, and its pictures are
noise. `demo:NAME` in a workflow builds it into `demo_models_dir()/NAME` on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from diffusers import (
    AutoencoderKL,
    DiffusionPipeline,
    DPMSolverMultistepScheduler,
    EulerDiscreteScheduler,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    PixArtSigmaPipeline,
    PixArtTransformer2DModel,
    PNDMScheduler,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
    StableDiffusionPipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    CLIPTokenizer,
    T5Config,
    T5EncoderModel,
    T5Tokenizer,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

from pipelines.diffusion.demo_flux2 import build_tiny_flux2_dev, build_tiny_flux2_klein
from pipelines.diffusion.demo_flux3 import build_tiny_flux3
from pipelines.diffusion.demo_krea2 import build_tiny_krea2, build_tiny_krea2_turbo
from pipelines.diffusion.demo_ltx2 import build_tiny_ltx2
from pipelines.diffusion.demo_minimax import build_tiny_minimax
from pipelines.diffusion.demo_qwenimage import build_tiny_qwenimage
from pipelines.diffusion.demo_qwenimage21 import build_tiny_qwenimage21, build_tiny_qwenimage21_turbo
from pipelines.diffusion.demo_qwenimage_edit import build_tiny_qwenimage_edit, build_tiny_qwenimage_edit_2511
from pipelines.diffusion.demo_wan import build_tiny_wan, build_tiny_wan22
from pipelines.diffusion.demo_wan_i2v import build_tiny_wan22_i2v, build_tiny_wan_flf2v, build_tiny_wan_i2v
from pipelines.diffusion.demo_wan_ti2v import build_tiny_wan22_ti2v
from pipelines.diffusion.demo_zimage import build_tiny_zimage
from pipelines.paths import demo_models_dir

# A small caption corpus: every word a demo prompt is likely to use gets whole-word tokens.
_CORPUS = (
    "a small large yellow red green blue white black purple orange triangle square circle star shape "
    "on the in of with and background photo painting of cat dog house tree mountain sky sunset portrait "
    "high quality detailed blurry ugly bad lowres"
).split()

# Stable Diffusion's scheduler settings (scaled-linear betas 0.00085..0.012, 1000 steps).
_SD_SCHEDULER = dict(
    beta_start=0.00085,
    beta_end=0.012,
    beta_schedule="scaled_linear",
    num_train_timesteps=1000,
    steps_offset=1,
    timestep_spacing="leading",
)

# A VAE with 4 blocks, so images are 8x the latents as in every real SD-family model.
TINY_VAE = dict(
    block_out_channels=[8, 16, 16, 16],
    in_channels=3,
    out_channels=3,
    latent_channels=4,
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    layers_per_block=1,
    norm_num_groups=4,
    sample_size=64,
)
TINY_CLIP = dict(
    hidden_size=32,
    intermediate_size=37,
    num_attention_heads=4,
    num_hidden_layers=2,
    max_position_embeddings=77,
    layer_norm_eps=1e-5,
    hidden_act="quick_gelu",
    projection_dim=32,
)
TINY_SD_UNET = dict(
    block_out_channels=[32, 64],
    layers_per_block=2,
    sample_size=8,
    in_channels=4,
    out_channels=4,
    down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
    up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
    cross_attention_dim=32,
    attention_head_dim=8,
    norm_num_groups=8,
)
# SDXL: two CLIPs (32 + 32 = 64 cross-attention width), text_time added embedding = 6 ids x 8 + pooled 32.
TINY_SDXL_UNET = dict(
    block_out_channels=[32, 64],
    layers_per_block=2,
    sample_size=8,
    in_channels=4,
    out_channels=4,
    down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
    up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"],
    attention_head_dim=[2, 4],
    use_linear_projection=True,
    addition_embed_type="text_time",
    addition_time_embed_dim=8,
    transformer_layers_per_block=[1, 2],
    projection_class_embeddings_input_dim=80,
    cross_attention_dim=64,
    norm_num_groups=8,
)
TINY_T5 = dict(
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    dropout_rate=0.0,
    feed_forward_proj="gated-gelu",
    is_encoder_decoder=False,
)
TINY_PIXART = dict(
    sample_size=8,
    num_layers=2,
    patch_size=2,
    attention_head_dim=8,
    num_attention_heads=3,
    caption_channels=32,
    in_channels=4,
    cross_attention_dim=24,
    out_channels=8,
    attention_bias=True,
    activation_fn="gelu-approximate",
    num_embeds_ada_norm=1000,
    norm_type="ada_norm_single",
    norm_elementwise_affine=False,
    norm_eps=1e-6,
)


# SD3: two CLIPs (projection 32 each: pooled 64) and a T5 of width 64 = the joint attention width.
TINY_SD3 = dict(
    sample_size=8,
    patch_size=1,
    in_channels=4,
    num_layers=1,
    attention_head_dim=8,
    num_attention_heads=4,
    caption_projection_dim=32,
    joint_attention_dim=64,
    pooled_projection_dim=64,
    out_channels=4,
)
# Flux: 16 = 4 latent channels x a 2x2 patch; rotary axes (4, 4, 8) add up to the head dim 16.
TINY_FLUX = dict(
    patch_size=1,
    in_channels=16,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=32,
    pooled_projection_dim=32,
    axes_dims_rope=[4, 4, 8],
    guidance_embeds=True,
)
# Flux-dev's scheduler: resolution-dependent shift of the sigmas.
_FLUX_SCHEDULER = dict(
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
)


def tiny_clip_tokenizer(*, pad_token: str = "<|endoftext|>") -> CLIPTokenizer:
    """A CLIP BPE tokenizer trained in memory on the demo corpus; every byte has a token (no unk)."""
    bos, eos = "<|startoftext|>", "<|endoftext|>"
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        min_frequency=1,
        special_tokens=[bos, eos],
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    bpe.train_from_iterator([" ".join(_CORPUS)] * 4, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    for char in bytes_to_unicode().values():
        for token in (char, char + "</w>"):
            vocab.setdefault(token, len(vocab))
    return CLIPTokenizer(
        vocab=vocab,
        merges=merges,
        bos_token=bos,
        eos_token=eos,
        unk_token=eos,
        pad_token=pad_token,
        model_max_length=77,
    )


def tiny_t5_tokenizer() -> T5Tokenizer:
    """A unigram (SentencePiece-style) T5 tokenizer over the demo corpus plus single characters."""
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [("▁" + w, -5.0) for w in sorted(set(_CORPUS))]
    pieces += [(c, -10.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789,.!?'-"]
    return T5Tokenizer(vocab=pieces, extra_ids=0)


def _clip_config(tokenizer: CLIPTokenizer) -> CLIPTextConfig:
    return CLIPTextConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_CLIP,
    )


def build_tiny_sd() -> StableDiffusionPipeline:
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**TINY_SD_UNET)
    torch.manual_seed(0)
    vae = AutoencoderKL(**TINY_VAE)
    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer()
    text_encoder = CLIPTextModel(_clip_config(tokenizer))
    return StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=PNDMScheduler(**_SD_SCHEDULER, set_alpha_to_one=False, skip_prk_steps=True),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


def build_tiny_sdxl() -> StableDiffusionXLPipeline:
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**TINY_SDXL_UNET)
    torch.manual_seed(0)
    vae = AutoencoderKL(**TINY_VAE, force_upcast=True)
    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer()
    text_encoder = CLIPTextModel(_clip_config(tokenizer))
    torch.manual_seed(0)
    tokenizer_2 = tiny_clip_tokenizer(pad_token="!")
    text_encoder_2 = CLIPTextModelWithProjection(_clip_config(tokenizer_2))
    scheduler = EulerDiscreteScheduler(**_SD_SCHEDULER)
    return StableDiffusionXLPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        scheduler=scheduler,
        force_zeros_for_empty_prompt=True,
    )


def build_tiny_pixart() -> PixArtSigmaPipeline:
    torch.manual_seed(0)
    transformer = PixArtTransformer2DModel(**TINY_PIXART)
    torch.manual_seed(0)
    vae = AutoencoderKL(**TINY_VAE)
    torch.manual_seed(0)
    tokenizer = tiny_t5_tokenizer()
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **TINY_T5,
        )
    )
    scheduler = DPMSolverMultistepScheduler(beta_schedule="linear", beta_start=0.0001, beta_end=0.02)
    return PixArtSigmaPipeline(
        transformer=transformer, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, scheduler=scheduler
    )


def build_tiny_sd3() -> StableDiffusion3Pipeline:
    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(**TINY_SD3)
    torch.manual_seed(0)
    vae = AutoencoderKL(
        **TINY_VAE,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    encoders: dict[str, Any] = {}
    for i, suffix in enumerate(("", "_2")):
        torch.manual_seed(i)
        encoders[f"tokenizer{suffix}"] = tiny_clip_tokenizer(pad_token="!" if suffix else "<|endoftext|>")
        encoders[f"text_encoder{suffix}"] = CLIPTextModelWithProjection(
            _clip_config(encoders[f"tokenizer{suffix}"])
        )
    torch.manual_seed(0)
    tokenizer_3 = tiny_t5_tokenizer()
    text_encoder_3 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_3),
            pad_token_id=tokenizer_3.pad_token_id,
            eos_token_id=tokenizer_3.eos_token_id,
            **{**TINY_T5, "d_model": 64},
        )
    )
    return StableDiffusion3Pipeline(
        transformer=transformer,
        vae=vae,
        text_encoder_3=text_encoder_3,
        tokenizer_3=tokenizer_3,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        **encoders,
    )


def build_tiny_flux() -> FluxPipeline:
    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(**TINY_FLUX)
    torch.manual_seed(0)
    vae = AutoencoderKL(
        **TINY_VAE,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    torch.manual_seed(0)
    tokenizer = tiny_clip_tokenizer()
    text_encoder = CLIPTextModel(_clip_config(tokenizer))
    torch.manual_seed(0)
    tokenizer_2 = tiny_t5_tokenizer()
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_2),
            pad_token_id=tokenizer_2.pad_token_id,
            eos_token_id=tokenizer_2.eos_token_id,
            **TINY_T5,
        )
    )
    return FluxPipeline(
        transformer=transformer,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        scheduler=FlowMatchEulerDiscreteScheduler(**_FLUX_SCHEDULER),
    )


DEMO_MODELS: dict[str, Callable[[], DiffusionPipeline]] = {
    "tiny-sd": build_tiny_sd,
    "tiny-sdxl": build_tiny_sdxl,
    "tiny-pixart": build_tiny_pixart,
    "tiny-sd3": build_tiny_sd3,
    "tiny-flux": build_tiny_flux,
    "tiny-zimage": build_tiny_zimage,
    "tiny-qwenimage": build_tiny_qwenimage,
    "tiny-flux2-klein": build_tiny_flux2_klein,
    "tiny-flux2-dev": build_tiny_flux2_dev,
    "tiny-wan": build_tiny_wan,
    "tiny-wan22": build_tiny_wan22,
    "tiny-wan-i2v": build_tiny_wan_i2v,
    "tiny-wan22-i2v": build_tiny_wan22_i2v,
    "tiny-wan-flf2v": build_tiny_wan_flf2v,
    "tiny-wan22-ti2v": build_tiny_wan22_ti2v,
    "tiny-qwenimage-edit": build_tiny_qwenimage_edit,
    "tiny-qwenimage-edit-2511": build_tiny_qwenimage_edit_2511,
    "tiny-krea2": build_tiny_krea2,
    "tiny-krea2-turbo": build_tiny_krea2_turbo,
    "tiny-flux3": build_tiny_flux3,
    "tiny-ltx2": build_tiny_ltx2,
    "tiny-minimax": build_tiny_minimax,
    "tiny-qwenimage21": build_tiny_qwenimage21,
    "tiny-qwenimage21-turbo": build_tiny_qwenimage21_turbo,
}


def build_demo_pipeline(name: str) -> DiffusionPipeline:
    """The demo pipeline in memory, float32 (tests compare against it)."""
    if name not in DEMO_MODELS:
        raise KeyError(f"no demo model {name!r}; known: {', '.join(DEMO_MODELS)}")
    return DEMO_MODELS[name]()


def save_demo_model(name: str, out_dir: Path) -> Path:
    """Build `name` and save it as a diffusers folder (safetensors) at `out_dir`, atomically."""
    pipe = build_demo_pipeline(name)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir.parent))
    try:
        pipe.save_pretrained(str(tmp), safe_serialization=True)
        os.replace(tmp, out_dir)  # another process may have won the race: then keep theirs
    except OSError:
        if not (out_dir / "model_index.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def ensure_demo_model(name: str, root: Path | None = None) -> Path:
    """The folder of demo model `name`, building it first when missing."""
    out_dir = (root or demo_models_dir()) / name
    if not (out_dir / "model_index.json").exists():
        save_demo_model(name, out_dir)
    return out_dir


def make_all_demo_models(root: Path | None = None) -> dict[str, Path]:
    """Build every demo model (for `app models make-demo`); returns name -> folder."""
    return {name: ensure_demo_model(name, root) for name in DEMO_MODELS}
