"""Krea 2's ComfyUI files: the transformer's names (ComfyUI's `SingleStreamDiT`, comfy/ldm/krea2/model.py) to
and from diffusers' `Krea2Transformer2DModel`, which shipped config a file takes (Turbo or the base model, by
its name), the schedule that config carries, and the fixture writer.

Lives here: `KREA2_FILES`, `is_krea2_transformer`, `to_diffusers`, `from_diffusers`, `by_name`,
`scheduler_config`, `write_krea2_files`. May import: stdlib, torch, safetensors, diffusers, transformers,
pipelines.diffusion.comfy_layouts.keys / variants / writer.

ComfyUI's names: `first`, `tmlp.0/2`, `tproj.1`, `txtfusion.{layerwise,refiner}_blocks.N`, `txtfusion.projector`,
`txtmlp.0.scale` (an RMSNorm) / `.1` / `.3`, `blocks.N.{mod.lin, prenorm.scale, postnorm.scale, attn.{wq, wk,
wv, gate, wo, qknorm.qnorm.scale, qknorm.knorm.scale}, mlp.{gate, up, down}}`, `last.{norm.scale, linear,
modulation.lin}`. Both sides keep the norms' zero-centred scales (`1 + weight`), so only names change, and each
block's six modulation vectors, which ComfyUI stores flat (6 x width), become diffusers' (6, width) table.
Reading goes through diffusers' `convert_krea2_transformer_checkpoint_to_diffusers`. The text encoder is
Qwen3-VL-4B as ComfyUI's other VL files are (`model.layers.*`, `visual.*`), read into `Qwen3VLModel`
(`language_model.*`, `visual.*`); the VAE is Qwen-Image's (`qwen_image_vae.safetensors`, original Wan names).
Turbo and the base model have the same shapes, so a file whose name says "turbo" takes the Turbo config
(`is_distilled`: a fixed shift), any other the base one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pipelines.diffusion.comfy_layouts.variants import Variant

# The file names ComfyUI's Krea 2 templates load (models/<folder>/<name>): the Turbo transformer as fp8 scaled
# (and as int8_convrot, which another loader reads), Qwen3-VL-4B fp8 scaled, Qwen-Image's VAE.
KREA2_FILES = {
    "turbo": "krea2_turbo_fp8_scaled.safetensors",
    "transformer": "krea2_fp8_scaled.safetensors",
    "text_encoder": "qwen3vl_4b_fp8_scaled.safetensors",
    "vae": "qwen_image_vae.safetensors",
}

# diffusers -> ComfyUI, a name's start (the inverse of diffusers' converter's prefix table).
_TOP = (
    ("img_in.", "first."),
    ("time_embed.linear_1.", "tmlp.0."),
    ("time_embed.linear_2.", "tmlp.2."),
    ("time_mod_proj.", "tproj.1."),
    ("txt_in.norm.weight", "txtmlp.0.scale"),
    ("txt_in.linear_1.", "txtmlp.1."),
    ("txt_in.linear_2.", "txtmlp.3."),
    ("text_fusion.", "txtfusion."),
    ("transformer_blocks.", "blocks."),
    ("final_layer.linear.", "last.linear."),
    ("final_layer.norm.weight", "last.norm.scale"),
    ("final_layer.scale_shift_table", "last.modulation.lin"),
)
# diffusers -> ComfyUI inside a block (single-stream and text-fusion blocks alike).
_BLOCK = (
    (".attn.to_q.", ".attn.wq."),
    (".attn.to_k.", ".attn.wk."),
    (".attn.to_v.", ".attn.wv."),
    (".attn.to_out.0.", ".attn.wo."),
    (".attn.to_gate.", ".attn.gate."),
    (".attn.norm_q.weight", ".attn.qknorm.qnorm.scale"),
    (".attn.norm_k.weight", ".attn.qknorm.knorm.scale"),
    (".ff.", ".mlp."),
    (".norm1.weight", ".prenorm.scale"),
    (".norm2.weight", ".postnorm.scale"),
    (".scale_shift_table", ".mod.lin"),
)


def is_krea2_transformer(names: set[str]) -> tuple[str, str] | None:
    """("krea2", "comfy" | "diffusers") when these (prefix-stripped) names are a Krea 2 transformer."""
    if any(k.startswith("txtfusion.") for k in names) and any(k.startswith("blocks.") for k in names):
        return "krea2", "comfy"
    if any(k.startswith("text_fusion.layerwise_blocks.") for k in names) and "time_mod_proj.weight" in names:
        return "krea2", "diffusers"
    return None


def to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ComfyUI Krea 2 transformer state (stubs or tensors) in diffusers' names."""
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    return convert_krea2_transformer_checkpoint_to_diffusers(dict(state))  # it pops: give it a copy


def from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers Krea 2 transformer state in ComfyUI's names (the file a ComfyUI user has)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        new = name
        for old, comfy in _TOP:
            if new.startswith(old):
                new = comfy + new[len(old) :]
                break
        if new.startswith("blocks.") and new.endswith(".scale_shift_table"):
            t = t.reshape(-1)  # ComfyUI keeps a block's six modulation vectors flat
        for old, comfy in _BLOCK:
            new = new.replace(old, comfy)
        out[new] = t
    return out


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
