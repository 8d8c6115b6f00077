"""Which family a model is, from what it holds: the registry's one detector for folders, files and names.

Lives here: `detect_family`, `family_from_keys`, `family_from_class_name`, `family_from_file_name`,
`family_from_text_encoders`, `folder_index`, `INDEX_FILES`. May import: stdlib, pipelines.diffusion.families; safetensors when a header is
read. (`detect_single_file_family`, the original-checkpoint layout, stays beside the layouts it returns.)

Every answer is an id of `FAMILIES` (or, for a file that is no whole model, the kind the library lists it as:
"text_encoder", "lora"); the markers come from the facts each `Family` declares. The models library, the
split-file loaders, the ComfyUI importer and the CLI all ask here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.diffusion.families import CLASS_MARKER_ORDER, FAMILIES, NAME_HINT_ORDER, SD, Family

# Kinds a header can show that are parts of a model, not a family.
PART_KINDS = ("text_encoder", "lora")
# What names a diffusers folder's pipeline: `DiffusionPipeline.save_pretrained`'s index, or a modular
# pipeline's (MiniMax H3 has only a `ModularPipeline`), tried in this order.
INDEX_FILES = ("model_index.json", "modular_model_index.json")


def folder_index(path: Path) -> Path | None:
    """The index file of a diffusers folder (`INDEX_FILES`), or None when `path` is not one."""
    return next((path / name for name in INDEX_FILES if (path / name).is_file()), None)


def family_from_class_name(name: str) -> str | None:
    """A diffusers folder's `_class_name` -> family id; the markers are substrings except SD's bare
    "StableDiffusion", which must start the name (it is the fallback, tried last)."""
    for family in CLASS_MARKER_ORDER:
        marker = family.class_marker
        if (name.startswith(marker) if family is SD else marker in name) and marker:
            return family.name
    return None


def family_from_file_name(name: object) -> str | None:
    """flux1-dev.safetensors -> "flux", sd3.5_large... -> "sd3", sd_xl_base... -> "sdxl" (a guess by name)."""
    lowered = name.lower() if isinstance(name, str) else ""
    return next((f.name for f in NAME_HINT_ORDER for m in f.name_markers if m in lowered), None)


def family_from_text_encoders(clips: int, t5s: int) -> Family | None:
    """The family whose text encoders are `clips` CLIP files and `t5s` T5 files (None: no such family)."""
    return next(
        (f for f in FAMILIES.values() if f.split_text_encoders and f.text_encoder_files == (clips, t5s)), None
    )


def family_from_keys(keys: list[str], shapes: dict[str, list[int]]) -> str | None:
    """A family id, "text_encoder" or "lora" from tensor names (and `conv_in` shapes); None when unknown."""

    def has(fragment: str) -> bool:
        return any(fragment in k for k in keys)

    # LTX-2's audio-video transformer: diffusers names, or the original one diffusers' single-file loader keys on
    if has("av_cross_attn_video_a2v_gate.") or has("av_ca_a2v_gate_adaln_single."):
        return "ltx2"
    if (has("audio_patch_proj.") and has("video_patch_proj.")) or (
        has("audio_proj_in.") and has("refiner_blocks.")
    ):
        return "minimax"  # MiniMax H3's transformer, ComfyUI (original) or diffusers names
    if has("decoder.transformer_blocks.0.scale1") or has("pre_block.attn.zero_k_bias"):
        return "minimax"  # MiniMax H3's video VAE (its ViT decoder) or audio VAE (comfy/sd.py's markers)
    if has("noise_refiner.") and has("context_refiner."):  # Z-Image, diffusers or original key names
        return "zimage"
    if has("text_fusion.layerwise_blocks.") and has("time_mod_proj."):  # Krea 2 (diffusers key names)
        return "krea2"
    if has("double_stream_modulation_img."):  # FLUX.2, diffusers or ComfyUI names; [dev] embeds a guidance
        return "flux2_dev" if has("guidance_embedder.") or has("guidance_in.") else "flux2_klein"
    if has("txt_in.text_norm.") and has(".img_mlp.gate_layer."):  # Qwen-Image 2.1 (diffusers key names)
        return "qwenimage21"
    if has("txt_norm.") and has(".img_mod.") and not has("double_blocks."):  # Qwen-Image (not Flux's img_mod)
        return "qwenimage"
    if has("head.modulation") or (has("condition_embedder.") and has("scale_shift_table")):  # Wan
        return "wan"
    if has("double_blocks.") or has("single_transformer_blocks."):
        return "flux"
    if has("joint_blocks.") or (has("transformer_blocks.") and has("context_embedder")):
        return "sd3"
    if has("conditioner.embedders.1.") or has("add_embedding.linear_1") or has("label_emb.0.0"):
        return "sdxl"
    if has("cond_stage_model.") or has("input_blocks.") or has("down_blocks.") and has("attn2"):
        return "sd"
    if has("text_model.encoder.") or has("encoder.block.0.") or has("text_projection"):
        return "text_encoder"
    latent = next((s[1] for k, s in shapes.items() if "decoder" in k and len(s) > 1), None)
    if latent is not None:  # a VAE: 4 latent channels (SD/SDXL) or 16 (SD3/Flux)
        return "sd" if latent == 4 else "sd3" if latent == 16 else None
    if has("lora_unet_") or has(".lora_A.") or has(".lora_down."):
        return "lora"
    return None


def detect_family(path: Path) -> str | None:
    """The family of a diffusers folder (model_index.json) or a safetensors file (its header only, never the
    weights); None when unknown."""
    if path.is_dir():
        index = folder_index(path)
        if index is not None:
            try:
                name = json.loads(index.read_text(encoding="utf-8")).get("_class_name", "")
            except (OSError, json.JSONDecodeError):
                return None
            return family_from_class_name(name)
        return None
    if path.suffix.lower() not in (".safetensors", ".sft"):
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
            shapes = {k: f.get_slice(k).get_shape() for k in keys if k.endswith("conv_in.weight")}
    except Exception:  # a damaged or non-safetensors file: no family, the loader reports the real error
        return None
    return family_from_keys(keys, shapes)
