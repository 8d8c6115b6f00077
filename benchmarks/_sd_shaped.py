"""An SD-shaped model with random weights, built offline, and the txt2img loop run through MemoryManager.

Shared by benchmarks/offload_cpu.py and benchmarks/offload_gpu.py (and usable from tests). Nothing here
downloads: configs are written out below, the tokenizer is a byte-level CLIP tokenizer made from files we
write, and weights come from a fixed seed. Shapes follow Stable Diffusion 1.x (UNet2DConditionModel with
cross-attention, CLIP text encoder with the 49408-token vocabulary, AutoencoderKL with 4 blocks, so images
are 8x the latents); widths are scaled so the whole model is about the size asked for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode

from memory import ComponentSpec, MemoryManager, Working
from pipelines.diffusion.working import diffusion_working_bytes

# Stable Diffusion 1.x: the UNet's stage widths are 320 x (1, 2, 4, 4); `unet_width` scales the 320.
SD_VOCAB = 49408
MARKER = "complete.json"


def unet_config(width: int = 320, cross_dim: int = 768, sample_size: int = 64) -> dict:
    return {
        "sample_size": sample_size,
        "in_channels": 4,
        "out_channels": 4,
        "block_out_channels": (width, 2 * width, 4 * width, 4 * width),
        "down_block_types": (
            "CrossAttnDownBlock2D",
            "CrossAttnDownBlock2D",
            "CrossAttnDownBlock2D",
            "DownBlock2D",
        ),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        "layers_per_block": 2,
        "cross_attention_dim": cross_dim,
        "attention_head_dim": 8,
        "norm_num_groups": 32,
    }


def text_config(layers: int = 12, hidden: int = 768) -> dict:
    return {
        "vocab_size": SD_VOCAB,
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 64,
        "max_position_embeddings": 77,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 1,
    }


def vae_config(width: int = 128) -> dict:
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ("DownEncoderBlock2D",) * 4,
        "up_block_types": ("UpDecoderBlock2D",) * 4,
        "block_out_channels": (width, 2 * width, 4 * width, 4 * width),
        "latent_channels": 4,
        "layers_per_block": 2,
        "norm_num_groups": 32,
        "scaling_factor": 0.18215,
    }


def write_tokenizer(folder: Path) -> None:
    """A byte-level CLIP tokenizer: every byte char (and its end-of-word form) is a token, no merges."""
    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=77)
    tok.save_pretrained(folder)


def build_pipeline_folder(
    folder: Path,
    *,
    unet_width: int,
    text_layers: int,
    vae_width: int,
    text_hidden: int = 768,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Write a diffusers-format SD folder (random weights, fixed seed) unless a complete one is there."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    recipe = {
        "unet_width": unet_width,
        "text_layers": text_layers,
        "vae_width": vae_width,
        "text_hidden": text_hidden,
        "dtype": str(dtype),
    }
    marker = folder / MARKER
    if marker.exists() and json.loads(marker.read_text()) == recipe:
        return folder
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**unet_config(unet_width, cross_dim=text_hidden))
    text = CLIPTextModel(CLIPTextConfig(**text_config(text_layers, text_hidden)))
    vae = AutoencoderKL(**vae_config(vae_width))
    if dtype != torch.float32:
        unet, text, vae = unet.to(dtype), text.to(dtype), vae.to(dtype)
    write_tokenizer(folder / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1
    )  # SD 1.x's schedule
    pipe = StableDiffusionPipeline(
        vae,
        text,
        tokenizer,
        unet,
        scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(folder)
    marker.write_text(json.dumps(recipe))
    return folder


def component_specs(folder: Path, dtype: torch.dtype = torch.float32) -> dict[str, ComponentSpec]:
    """What a pipeline declares to the memory manager: builders, weight files and streamable blocks."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel

    def loader(cls: type, sub: str) -> Callable[[], torch.nn.Module]:
        # Load at the dtype stored; the manager casts to `dtype` (and only when it differs).
        return lambda: cls.from_pretrained(folder / sub).eval()

    def files(sub: str) -> tuple[Path, ...]:
        return tuple(sorted((folder / sub).glob("*.safetensors")))

    key = str(folder)
    return {
        "text_encoder": ComponentSpec(
            f"{key}#text_encoder", "text_encoder", "text_encoder", loader(CLIPTextModel, "text_encoder"),
            files("text_encoder"), dtype, ("encoder.layers",),
        ),
        "unet": ComponentSpec(
            f"{key}#unet", "unet", "denoiser", loader(UNet2DConditionModel, "unet"),
            files("unet"), dtype, ("down_blocks", "up_blocks"),
        ),
        "vae": ComponentSpec(
            f"{key}#vae", "vae", "vae", loader(AutoencoderKL, "vae"), files("vae"), dtype,
            # Decoding never calls the encoder: declared as blocks, its weights are never read at all.
            ("encoder.down_blocks", "decoder.up_blocks"),
        ),
    }  # fmt: skip


def txt2img(
    mm: MemoryManager,
    folder: Path,
    *,
    prompt: str,
    steps: int,
    size: int,
    seed: int = 0,
    guidance: float = 7.5,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Encode -> denoise -> decode, each component taken through `mm.use`. Returns (image, seconds per phase)."""
    from diffusers import EulerDiscreteScheduler
    from transformers import CLIPTokenizer

    specs = {name: mm.register(spec) for name, spec in component_specs(folder, dtype).items()}
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    scheduler = EulerDiscreteScheduler.from_pretrained(folder / "scheduler")
    device = mm.device
    times: dict[str, float] = {}
    with torch.no_grad():
        # 1. Encode the prompt and the empty negative prompt.
        t0 = time.perf_counter()
        ids = tokenizer(
            ["", prompt], padding="max_length", max_length=77, truncation=True, return_tensors="pt"
        )
        formula = diffusion_working_bytes(
            "text_encoder", height=size, width=size, dtype=dtype, guidance=False
        )
        # A measurement from an earlier run (memory.learned) wins over the formula.
        with (
            mm.node_scope("encode", "TextEncode"),
            mm.use(specs["text_encoder"], working=Working(formula, "2x77")) as te,
        ):
            embeds = te(ids.input_ids.to(device))[0]
        times["encode"] = time.perf_counter() - t0
        # 2. Prepare timesteps and latents.
        scheduler.set_timesteps(steps, device=device)
        g = torch.Generator("cpu").manual_seed(seed)
        latents = torch.randn((1, 4, size // 8, size // 8), generator=g, dtype=dtype).to(device)
        latents = latents * scheduler.init_noise_sigma
        # 3. Denoising loop with classifier-free guidance.
        t0 = time.perf_counter()
        formula = diffusion_working_bytes("denoiser", height=size, width=size, dtype=dtype)
        with (
            mm.node_scope("denoise", "Denoise"),
            mm.use(specs["unet"], working=Working(formula, f"{size}x{size}")) as unet,
        ):
            for i, t in enumerate(scheduler.timesteps):
                ts = time.perf_counter()
                model_input = scheduler.scale_model_input(torch.cat([latents] * 2), t)
                noise = unet(model_input, t, encoder_hidden_states=embeds).sample
                uncond, cond = noise.chunk(2)
                noise = uncond + guidance * (cond - uncond)
                latents = scheduler.step(noise, t, latents).prev_sample
                mm.record_step("denoise", "sampler_step", i, steps, time.perf_counter() - ts)
        times["denoise"] = time.perf_counter() - t0
        # 4. Decode.
        t0 = time.perf_counter()
        channels = tuple(json.loads((folder / "vae" / "config.json").read_text())["block_out_channels"])
        formula = diffusion_working_bytes(
            "vae_decode", height=size, width=size, dtype=dtype, block_out_channels=channels
        )
        with (
            mm.node_scope("decode", "VaeDecode"),
            mm.use(specs["vae"], working=Working(formula, f"{size}x{size}")) as vae,
        ):
            image = vae.decode(latents / vae.config.scaling_factor).sample
        times["decode"] = time.perf_counter() - t0
    return image.float().cpu(), times
