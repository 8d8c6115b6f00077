"""Qwen-Image 2.1's ComfyUI files: which shipped config a transformer file takes (Turbo or the base, by its
name), the schedule that config carries, and the fixture writer (a diffusers folder as ComfyUI's files).

Lives here: `QWEN21_FILES`, `by_name`, `scheduler_config`, `write_qwen21_files`. May import: stdlib, torch,
safetensors, diffusers, transformers, pipelines.diffusion.assembly / families / comfy_layouts.keys / variants /
writer / quant_writer.

The transformer file is diffusers' names with each block's SwiGLU gate and up projections fused
(`img_mlp.gate_up`, gate rows first: diffusers' `convert_qwen_image21_transformer_checkpoint_to_diffusers`
says ComfyUI stores it so); the text encoder is Qwen3-VL repackaged as ComfyUI's other VL files are
(`model.layers.*`, the vision tower as `visual.*`); the VAE is read in diffusers' names (ComfyUI's own layout
of `qwen_image_2.1_vae` was not at hand to check). Turbo and the base model have the same shapes, so a file
whose name says "turbo" takes the Turbo config (its `sample_sigmas`), any other the base one. The released
transformer and text encoder are `int8_tensorwise` + ConvRot (`comfy_quant`), dequantized as every ComfyUI file
is read (`lazy_load.header_stubs`); the fixture writer writes that form too when asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipelines.diffusion.comfy_layouts.variants import Variant

# The file names ComfyUI's Qwen-Image 2.1 templates load (models/<folder>/<name>).
QWEN21_FILES = {
    "transformer": "qwen_image_2.1_int8_convrot.safetensors",
    "turbo": "qwen_image_2.1_turbo_int8_convrot.safetensors",
    "text_encoder": "qwen3vl_8b_int8_convrot.safetensors",
    "vae": "qwen_image_2.1_vae_bf16.safetensors",
}


def _is_turbo(variant: Variant) -> bool:
    try:
        index = json.loads((variant.folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(index.get("sample_sigmas"))


def by_name(candidates: list[Variant], file_name: str) -> list[Variant]:
    """The candidates a file of this name may take: Turbo's for a "turbo" name, the others otherwise (a given
    config folder, the only candidate, is kept either way)."""
    if len(candidates) <= 1:
        return candidates
    turbo = "turbo" in file_name.lower()
    return [v for v in candidates if _is_turbo(v) == turbo]


def scheduler_config(folder: Path) -> dict[str, Any]:
    """The config folder's scheduler settings, with its model_index.json `sample_sigmas` when it has them
    (the Qwen-Image 2.1 loop reads them from there: a ComfyUI file has no folder of its own)."""
    config = json.loads((folder / "scheduler" / "scheduler_config.json").read_text(encoding="utf-8"))
    try:
        sigmas = json.loads((folder / "model_index.json").read_text(encoding="utf-8")).get("sample_sigmas")
    except (OSError, ValueError):
        sigmas = None
    return {**config, "sample_sigmas": sigmas} if sigmas else config


def write_qwen21_files(folder: Path, models: Path, *, turbo: bool = False, quant: str | None = None) -> Path:
    """Write the diffusers `folder` as ComfyUI's Qwen-Image 2.1 files under `models/` (under the templates'
    names: plain float tensors, or the transformer and text encoder in `quant`, one of
    `quant_writer.QUANT_FORMATS`, e.g. "int8_convrot" as released); returns `models`."""
    import torch
    from diffusers import AutoencoderKLQwenImage21, QwenImage21Transformer2DModel
    from safetensors.torch import save_file
    from transformers import Qwen3VLForConditionalGeneration

    from pipelines.diffusion.comfy_layouts.keys import transformer_from_diffusers, vae_from_diffusers
    from pipelines.diffusion.comfy_layouts.quant_writer import comfy_quant_state
    from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

    def save(state: dict[str, torch.Tensor], path: Path, quantize: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if quantize and quant is not None:
            state = comfy_quant_state(state, quant)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))

    transformer = QwenImage21Transformer2DModel.from_pretrained(str(folder), subfolder="transformer")
    name = QWEN21_FILES["turbo" if turbo else "transformer"]
    save(
        transformer_from_diffusers("qwenimage21", transformer.state_dict()),
        models / "diffusion_models" / name,
        quantize=True,
    )
    encoder = Qwen3VLForConditionalGeneration.from_pretrained(str(folder), subfolder="text_encoder")
    state = text_encoder_to_comfy(encoder.state_dict(), "Qwen3VLForConditionalGeneration")
    save(state, models / "text_encoders" / QWEN21_FILES["text_encoder"], quantize=True)
    vae = AutoencoderKLQwenImage21.from_pretrained(str(folder), subfolder="vae")
    save(
        vae_from_diffusers("diffusers", vae.state_dict(), dict(vae.config)),
        models / "vae" / QWEN21_FILES["vae"],
    )
    return models
