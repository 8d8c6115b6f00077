"""Krea 2's ComfyUI files: the transformer's names (ComfyUI's `SingleStreamDiT`, comfy/ldm/krea2/model.py) to
and from diffusers' `Krea2Transformer2DModel`, which shipped config a file takes (Turbo or the base model, by
its name), the schedule that config carries, and the fixture writer.

Lives here: `KREA2_FILES`, `by_name`, `scheduler_config`, `write_krea2_files` (the names themselves:
`krea2_keys`). May import: stdlib, torch, safetensors, diffusers, transformers,
pipelines.diffusion.comfy_layouts.keys / krea2_keys / variants / writer.

The transformer's names are ComfyUI's `SingleStreamDiT`'s (`krea2_keys`). The text encoder is
Qwen3-VL-4B as ComfyUI's other VL files are (`model.layers.*`, `visual.*`), read into `Qwen3VLModel`
(`language_model.*`, `visual.*`); the VAE is Qwen-Image's (`qwen_image_vae.safetensors`, original Wan names).
Turbo and the base model have the same shapes, so a file whose name says "turbo" takes the Turbo config
(`is_distilled`: a fixed shift), any other the base one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pipelines.diffusion.comfy_layouts.krea2_keys import from_diffusers, is_krea2_transformer, to_diffusers
from pipelines.diffusion.comfy_layouts.variants import Variant

__all__ = [
    "KREA2_FILES",
    "by_name",
    "from_diffusers",
    "is_krea2_transformer",
    "scheduler_config",
    "to_diffusers",
]

# The file names ComfyUI's Krea 2 templates load (models/<folder>/<name>): the Turbo transformer as fp8 scaled
# (and as int8_convrot, which another loader reads), Qwen3-VL-4B fp8 scaled, Qwen-Image's VAE. No open-weight
# template loads the base model: "transformer" is a fixture name of ours for a base file (no "turbo" in it).
KREA2_FILES = {
    "turbo": "krea2_turbo_fp8_scaled.safetensors",
    "transformer": "krea2_fp8_scaled.safetensors",
    "text_encoder": "qwen3vl_4b_fp8_scaled.safetensors",
    "vae": "qwen_image_vae.safetensors",
}


def _is_turbo(variant: Variant) -> bool:
    try:
        index = json.loads((variant.folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(index.get("is_distilled"))


def by_name(candidates: list[Variant], file_name: str) -> list[Variant]:
    """The candidates a file of this name may take: Turbo's for a "turbo" name, the others otherwise (a given
    config folder, the only candidate, is kept either way)."""
    if len(candidates) <= 1:
        return candidates
    turbo = "turbo" in file_name.lower()
    return [v for v in candidates if _is_turbo(v) == turbo]


def scheduler_config(folder: Path) -> dict[str, Any]:
    """The config folder's scheduler settings, with `is_distilled` from its model_index.json when set (the Krea 2
    loop reads the Turbo flag from there: a ComfyUI file has no folder of its own)."""
    config = json.loads((folder / "scheduler" / "scheduler_config.json").read_text(encoding="utf-8"))
    try:
        distilled = bool(
            json.loads((folder / "model_index.json").read_text(encoding="utf-8")).get("is_distilled")
        )
    except (OSError, ValueError):
        distilled = False
    return {**config, "is_distilled": True} if distilled else config


def write_krea2_files(folder: Path, models: Path, *, turbo: bool = True) -> Path:
    """Write the Krea 2 diffusers `folder` as ComfyUI's files under `models/` (plain float tensors under the
    templates' names: the loaders read a file's form from its tensors, not its name); returns `models`."""
    from diffusers import AutoencoderKLQwenImage, Krea2Transformer2DModel
    from safetensors.torch import save_file
    from transformers import Qwen3VLModel

    from pipelines.diffusion.comfy_layouts.keys import vae_from_diffusers
    from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

    def save(state: dict[str, torch.Tensor], path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))

    transformer = Krea2Transformer2DModel.from_pretrained(str(folder), subfolder="transformer")
    name = KREA2_FILES["turbo" if turbo else "transformer"]
    save(from_diffusers(transformer.state_dict()), models / "diffusion_models" / name)
    encoder = Qwen3VLModel.from_pretrained(str(folder), subfolder="text_encoder")
    state = text_encoder_to_comfy(encoder.state_dict(), "Qwen3VLModel")
    save(state, models / "text_encoders" / KREA2_FILES["text_encoder"])
    vae = AutoencoderKLQwenImage.from_pretrained(str(folder), subfolder="vae")
    save(vae_from_diffusers("wan", vae.state_dict(), dict(vae.config)), models / "vae" / KREA2_FILES["vae"])
    return models
