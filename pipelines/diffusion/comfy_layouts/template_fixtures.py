"""Tiny fixtures of every model family a ComfyUI template runs here, written as ComfyUI's files.

Lives here: `FAMILY_OF_NAME` (a template's model file name marker -> fixture id), `fixture_of_name`,
`write_fixture` (a fixture id -> a ComfyUI models folder of tiny files plus the demo folder they came from),
`write_flux1_files`, `save_ltx2_upsampler`, `save_tiny_upscaler`, `save_tiny_qwen35`, `QWEN35_NAMES`,
`write_tiny_clip`, `MODEL_FREE`. May import: stdlib, torch, safetensors, diffusers, transformers,
`pipelines.diffusion` (demo models, the ComfyUI layout writers, the single-file exporters),
`pipelines.image.rrdbnet`, `pipelines.paths`, PyAV.

Used by `benchmarks/comfy_template_runs.py` (every runnable template on tiny files under its own names) and by
the template tests. The files hold plain float tensors under released names; the loaders read what a file is
from its tensors, so a template's fp8 / int8 name can hold them (linked by the caller).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# A marker in a template's model file name -> fixture id; tried in order (the first match wins), so the more
# specific markers come first ("qwen_image_2.1" before "qwen_image").
FAMILY_OF_NAME: tuple[tuple[str, str], ...] = (
    ("qwen_image_2.1", "qwenimage21"),
    ("qwen_image_edit_2511", "qwenimage_edit_2511"),
    ("qwen_image_edit", "qwenimage_edit"),
    ("firered-image-edit", "qwenimage_edit"),  # FireRed Image Edit: a Qwen-Image-Edit fine-tune
    ("qwen_image", "qwenimage"),
    ("z_image", "zimage"),
    ("flux-2-klein", "flux2_klein"),
    ("flux2_dev", "flux2_dev"),
    ("flux3", "flux3"),
    ("krea2", "krea2"),
    ("minimax_h3", "minimax"),
    ("fasth3", "minimax"),  # FastVideo's FastH3: a distilled MiniMax H3
    ("ltx-2", "ltx2"),
    ("wan2.2_i2v", "wan22_i2v"),
    ("wan2.2_t2v", "wan22_t2v"),
    ("wan2.2_ti2v", "wan22_ti2v"),
    ("wan2.1_i2v", "wan_i2v"),
    ("wan2.1_flf2v", "wan_flf2v"),
    ("wan2.1_t2v", "wan"),
    ("flux1", "flux1"),
    ("flux.1", "flux1"),
    ("sd_xl", "sdxl"),
    ("sd3", "sd3"),  # sd3.5_large_fp8_scaled: ComfyUI's all-in-one checkpoint
)
# Fixture id -> (demo model, our family id).
_DEMOS = {
    "zimage": ("tiny-zimage", "zimage"),
    "qwenimage": ("tiny-qwenimage", "qwenimage"),
    "qwenimage_edit": ("tiny-qwenimage-edit", "qwenimage_edit"),
    "qwenimage_edit_2511": ("tiny-qwenimage-edit-2511", "qwenimage_edit"),
    "flux2_klein": ("tiny-flux2-klein", "flux2_klein"),
    "flux2_dev": ("tiny-flux2-dev", "flux2_dev"),
    "qwenimage21": ("tiny-qwenimage21", "qwenimage21"),
    "krea2": ("tiny-krea2-turbo", "krea2"),
    "flux3": ("tiny-flux3", "flux3"),
    "minimax": ("tiny-minimax", "minimax"),
    "ltx2": ("tiny-ltx2", "ltx2"),
    "wan": ("tiny-wan", "wan"),
    "wan22_t2v": ("tiny-wan22", "wan"),
    "wan22_i2v": ("tiny-wan22-i2v", "wan"),
    "wan22_ti2v": ("tiny-wan22-ti2v", "wan"),
    "wan_i2v": ("tiny-wan-i2v", "wan"),
    "wan_flf2v": ("tiny-wan-flf2v", "wan"),
    "flux1": ("tiny-flux", "flux"),
    "sdxl": ("tiny-sdxl", "sdxl"),
    "sd3": ("tiny-sd3", "sd3"),
}
# Fixtures whose tiny shapes are no released size: their loaders read the config from the demo folder.
NEEDS_CONFIG_DIR = frozenset({"flux1", "sdxl", "sd3"})
# The fixture of templates with no denoiser (the upscaler utilities): no demo folder, only the files every
# fixture has (a tiny Real-ESRGAN under the name ComfyUI's templates use).
MODEL_FREE = "model-free"
UPSCALER_NAME = "RealESRGAN_x4plus.safetensors"
# ComfyUI's Qwen3.5 files the templates' TextGenerate reads, by fixture: FLUX.3 [klein]'s prompt upsampler,
# Qwen-Image 2.1's prompt enhancers, the text-generation template's model (no denoiser: the model-free fixture).
QWEN35_NAMES: dict[str, tuple[str, ...]] = {
    "flux3": ("qwen3.5_9b_flux3_prompt_upsampler_w4a8.safetensors",),
    "qwenimage21": (
        "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors",
        "qwen3.5_9b_qwen_image_2.1_pe_i2i.int8_convrot.safetensors",
    ),
    MODEL_FREE: ("qwen3.5_4b_bf16.safetensors",),
}


def fixture_of_name(name: str) -> str | None:
    lowered = name.lower()
    return next((fixture for marker, fixture in FAMILY_OF_NAME if marker in lowered), None)


def _save(state: dict[str, Any], path: Path, metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata=metadata)


def save_tiny_upscaler(path: Path, *, seed: int = 0) -> Path:
    """Real-ESRGAN x4plus's layout (BasicSR's names) with 16 features and 2 blocks (the released file: 64 and
    23), seeded: what a template's `RealESRGAN_x4plus.safetensors` holds here."""
    import torch

    from pipelines.image.rrdbnet import RRDBNet

    torch.manual_seed(seed)
    model = RRDBNet(num_feat=16, num_block=2, num_grow_ch=32)
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("conv_ups."):  # conv_ups.0 -> conv_up1, as the released file names them
            _, index, rest = key.split(".", 2)
            key = f"conv_up{int(index) + 1}.{rest}"
        state[key] = value
    _save(state, path)
    return path


def save_tiny_qwen35(path: Path, *, vision: bool = True, seed: int = 0) -> Any:
    """A seeded Qwen3.5 of the shipped tiny config (`resources/configs/qwen3.5-tiny`) in ComfyUI's names
    (comfy/text_encoders/qwen35.py: `model.*`, `visual.*` unless `vision` is off, `lm_head`); returns the
    transformers `Qwen3_5ForConditionalGeneration` holding the same weights."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from pipelines.paths import RESOURCES_DIR

    torch.manual_seed(seed)
    config = Qwen3_5Config.from_pretrained(str(RESOURCES_DIR / "configs" / "qwen3.5-tiny" / "text_encoder"))
    model = Qwen3_5ForConditionalGeneration(config).eval()
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("model.visual."):
            if not vision:
                continue
            name = name.removeprefix("model.")
        elif name.startswith("model.language_model."):
            name = "model." + name.removeprefix("model.language_model.")
        state[name] = tensor.detach()
    _save(state, path)
    return model


def write_tiny_clip(path: Path, frames: int = 3, size: tuple[int, int] = (24, 16), fps: int = 8) -> Path:
    """A short H.264 clip (a colour ramp whose blue rises over time) for a template's Load Video name."""
    import av
    import numpy as np

    w, h = size
    path.parent.mkdir(parents=True, exist_ok=True)
    ys, xs = np.mgrid[0:h, 0:w]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for t in range(frames):
            rgb = np.stack([xs * 255 // (w - 1), ys * 255 // (h - 1), np.full_like(xs, 40 * t)], -1)
            frame = av.VideoFrame.from_ndarray(rgb.astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_flux1_files(folder: Path, models: Path, names: dict[str, str]) -> None:
    """The tiny Flux's parts under FLUX.1 templates' file names (`names`: denoiser / clip_l / t5 / vae -> name):
    the transformer and text encoders in diffusers' / transformers' names (no writer of BFL's layout here; the
    loader reads both), the VAE in its original layout, as `ae.safetensors` is."""
    from diffusers import DiffusionPipeline

    from pipelines.diffusion.export import VAE_PREFIX, vae_to_original

    pipe = DiffusionPipeline.from_pretrained(str(folder))
    _save(pipe.transformer.state_dict(), models / "diffusion_models" / names["denoiser"])
    _save(pipe.text_encoder.state_dict(), models / "text_encoders" / names["clip_l"])
    t5 = {k: v for k, v in pipe.text_encoder_2.state_dict().items() if k != "encoder.embed_tokens.weight"}
    _save(t5, models / "text_encoders" / names["t5"])  # the embedding is stored once, as `shared`
    vae = vae_to_original(pipe.vae.state_dict(), dict(pipe.vae.config))
    _save({k.removeprefix(VAE_PREFIX): v for k, v in vae.items()}, models / "vae" / names["vae"])


def save_ltx2_upsampler(folder: Path, path: Path) -> None:
    """A tiny LTX-2 latent upsampler (seeded) in the format ComfyUI reads: its config in the file's metadata."""
    import torch
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

    channels = json.loads((folder / "vae" / "config.json").read_text(encoding="utf-8"))["latent_channels"]
    config = {
        "in_channels": channels,
        "mid_channels": 32,  # GroupNorm's 32 groups
        "num_blocks_per_stage": 1,
        "dims": 3,
        "spatial_upsample": True,
        "temporal_upsample": False,
        "use_rational_resampler": False,
    }
    torch.manual_seed(0)
    model = LTX2LatentUpsamplerModel(**config)
    _save(model.state_dict(), path, metadata={"config": json.dumps(config)})


def _write_wan(folder: Path, models: Path) -> None:
    """Wan's files: the experts as `high_noise.safetensors` (`transformer`) and `low_noise.safetensors`
    (`transformer_2`, when the folder has one), the text encoder, VAE and CLIP vision encoder (if any)."""
    import shutil

    import torch
    from diffusers import WanTransformer3DModel

    from pipelines.diffusion.comfy_layouts.keys import LAYOUTS, transformer_from_diffusers
    from pipelines.diffusion.comfy_layouts.writer import write_comfy_files

    staging = write_comfy_files(folder, "wan", models.parent / "staging") / "models"
    shutil.rmtree(staging / "diffusion_models")
    for sub in ("text_encoders", "vae"):
        shutil.copytree(staging / sub, models / sub, dirs_exist_ok=True)
    shutil.rmtree(staging.parent)
    for part, name in (("transformer", "high_noise"), ("transformer_2", "low_noise")):
        if (folder / part).is_dir():
            expert = WanTransformer3DModel.from_pretrained(str(folder), subfolder=part, dtype=torch.float32)
            state = transformer_from_diffusers(LAYOUTS["wan"], expert.state_dict())
            _save(state, models / "diffusion_models" / f"{name}.safetensors")
    if (folder / "image_encoder").is_dir():  # in transformers' names, as ComfyUI's clip_vision_h file is
        from transformers import CLIPVisionModel

        encoder = CLIPVisionModel.from_pretrained(str(folder), subfolder="image_encoder")
        state = {f"vision_model.{k}": v for k, v in encoder.state_dict().items()}
        _save(state, models / "clip_vision" / "clip_vision.safetensors")


def _write_all_in_one(folder: Path, path: Path, layout: str) -> None:
    """The demo as ComfyUI's all-in-one checkpoint (CheckpointLoaderSimple's `flux1-schnell-fp8`,
    `sd3.5_large_fp8_scaled`): the transformer in its release names, text encoders and VAE beside it."""
    from diffusers import DiffusionPipeline

    from pipelines.diffusion.export_flow import save_flux_single_file, save_sd3_single_file

    pipe = DiffusionPipeline.from_pretrained(str(folder))
    if layout == "flux1":
        save_flux_single_file(pipe.transformer, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, path)
    else:
        encoders = (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3)
        save_sd3_single_file(pipe.transformer, pipe.vae, encoders, path)


def write_fixture(fixture: str, work: Path) -> tuple[Path | None, Path]:
    """(the demo's diffusers folder, a ComfyUI models folder of its tiny files) for a fixture id, under `work`;
    no demo folder for `MODEL_FREE`. Every fixture's models folder also holds the tiny upscaler."""
    models = work / "ComfyUI" / "models"
    save_tiny_upscaler(models / "upscale_models" / UPSCALER_NAME)
    for name in QWEN35_NAMES.get(fixture, ()):
        save_tiny_qwen35(models / "text_encoders" / name)
    if fixture == MODEL_FREE:
        return None, models
    return _write_family(fixture, work), models


def _write_family(fixture: str, work: Path) -> Path:
    from pipelines.diffusion.demo_models import save_demo_model

    demo, family = _DEMOS[fixture]
    folder = save_demo_model(demo, work / demo)
    models = work / "ComfyUI" / "models"
    if fixture in (
        "zimage",
        "qwenimage",
        "qwenimage_edit",
        "qwenimage_edit_2511",
        "flux2_klein",
        "flux2_dev",
    ):
        from pipelines.diffusion.comfy_layouts.writer import write_comfy_files

        write_comfy_files(folder, family, models.parent)
    elif fixture == "qwenimage21":
        from pipelines.diffusion.comfy_layouts.qwen21 import write_qwen21_files

        write_qwen21_files(folder, models)
        write_qwen21_files(save_demo_model("tiny-qwenimage21-turbo", work / "turbo"), models, turbo=True)
    elif fixture == "krea2":
        from pipelines.diffusion.comfy_layouts.krea2 import write_krea2_files

        write_krea2_files(folder, models)
    elif fixture == "flux3":
        from pipelines.diffusion.comfy_layouts.flux3 import write_flux3_files

        write_flux3_files(folder, models)
    elif fixture == "minimax":
        from pipelines.diffusion.comfy_layouts.minimax import write_minimax_files

        write_minimax_files(folder, models)
    elif fixture == "ltx2":
        from pipelines.diffusion.comfy_layouts.ltx2_writer import write_ltx2_files

        write_ltx2_files(folder, models)
        save_ltx2_upsampler(folder, models / "latent_upscale_models" / "upsampler.safetensors")
    elif fixture.startswith("wan"):
        _write_wan(folder, models)
    elif fixture == "flux1":
        names = {"denoiser": "flux1.safetensors", "clip_l": "clip_l.safetensors", "t5": "t5xxl.safetensors"}
        write_flux1_files(folder, models, {**names, "vae": "ae.safetensors"})
        _write_all_in_one(folder, models / "checkpoints" / "flux1.safetensors", "flux1")
    elif fixture == "sd3":
        _write_all_in_one(folder, models / "checkpoints" / "sd3.safetensors", "sd3")
    elif fixture == "sdxl":
        from diffusers import DiffusionPipeline

        from pipelines.diffusion.export import save_sdxl_single_file

        pipe = DiffusionPipeline.from_pretrained(str(folder))
        (models / "checkpoints").mkdir(parents=True, exist_ok=True)
        checkpoint = models / "checkpoints" / "sdxl.safetensors"
        save_sdxl_single_file(pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, checkpoint)
    return folder


def write_lora(fixture: str, folder: Path, path: Path, *, seed: int = 7, rank: int = 4) -> Path:
    """A small diffusers/PEFT LoRA (`transformer.<layer>.lora_A/B.weight`, seeded, lora_alpha == rank) of two
    linear layers of the fixture's first transformer block: what a template's LoRA loader reads here."""
    import torch

    from pipelines.diffusion.families import FAMILIES

    fam = FAMILIES[_DEMOS[fixture][1]]
    model = fam.denoiser_class.from_pretrained(str(folder), subfolder=fam.denoiser_subfolder)
    block = f"{fam.denoiser_blocks[0]}.0."
    linears = [
        (n, m) for n, m in model.named_modules() if n.startswith(block) and isinstance(m, torch.nn.Linear)
    ]
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, layer in linears[:2]:
        state[f"transformer.{name}.lora_A.weight"] = torch.randn(rank, layer.in_features, generator=gen) * 0.2
        state[f"transformer.{name}.lora_B.weight"] = (
            torch.randn(layer.out_features, rank, generator=gen) * 0.2
        )
    if fam.name == "ltx2":  # ComfyUI's LTX-2 LoRAs name the checkpoint's layers (diffusion_model.*)
        from pipelines.diffusion.lora_ltx2 import ltx2_lora_to_comfy

        state = ltx2_lora_to_comfy(state)
    _save(state, path)
    return path
