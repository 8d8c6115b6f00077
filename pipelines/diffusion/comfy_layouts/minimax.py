"""MiniMax H3's ComfyUI files: which names they carry, and ComfyUI's tensor names to and from diffusers'.

Lives here: `MINIMAX_FILES`, `transformer_names`, `vae_kind`, `transformer_to_diffusers`,
`transformer_from_diffusers`, `video_vae_to_diffusers`, `video_vae_from_diffusers`, `audio_vae_to_diffusers`,
`audio_vae_from_diffusers`, `curve_form`, `write_minimax_files`. May import: stdlib, torch, safetensors, diffusers,
transformers, pipelines.diffusion.comfy_layouts.prefix / minimax_keys / writer.

ComfyUI's layouts (comfy/ldm/minimax/model.py, vae.py, audio_vae.py, comfy/text_encoders/minimax.py, and the
detection in comfy/sd.py) keep MiniMax's original names:
- transformer (`models/diffusion_models/`): `video_patch_proj`, `audio_patch_proj`, `condition_proj`,
  `time_embedder.proj_in/out`, `token_refiner.blocks.N`, `blocks.N.attn.qkv_proj` (`[q; k; v]` stacked),
  `blocks.N.mlp.fc1` (`[gate; value]`), `final_layer.*`, `rope.inv_freq`. diffusers' own
  `convert_minimax_h3_transformer_checkpoint_to_diffusers` reads it. The released `*_pruned_*` files are the
  "curve form": `adaln_t_table` (grid x r) replaces the time embedder, and every AdaLN projection reads r
  coordinates of the curve (linearly interpolated at t) with no SiLU; it becomes `time_embedder.table` of
  `minimax_load.curve_transformer`, diffusers' module with that embedder.
- video VAE (`models/vae/`): the encoder in CompVis names (`encoder.down.I.block.J`, `nin_shortcut`,
  `down.I.downsample`), the ViT decoder's `x_embedder`, per-head interleaved `attn.to_qkv`, `ff.w1`
  (`[gate; up]`) / `ff.w2`, an unused `decoder.mask_token`, and the `latents_mean` / `latents_std` buffers
  (diffusers keeps them in the config). Detected as ComfyUI does: `decoder.transformer_blocks.0.scale1`.
- audio VAE: diffusers' names (the original's) with each weight-norm pair folded into one `weight`, plus the
  latent statistics buffers. Detected by `pre_block.attn.zero_k_bias`.
- text encoder (`models/text_encoders/`): Qwen3-VL-32B as ComfyUI's other VL files (`model.layers.*`,
  `visual.*`), truncated after decoder layer 50 (the layer H3 reads): `text_encoders.py` loads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pipelines.diffusion.comfy_layouts.minimax_keys import (
    transformer_to_diffusers as transformer_to_diffusers,
)
from pipelines.diffusion.comfy_layouts.prefix import strip_prefix

# The file names ComfyUI's MiniMax H3 templates load (models/<folder>/<name>); the video templates name the
# int8 video VAE, the text-to-image one the fp16.
MINIMAX_FILES = {
    "transformer": "minimax_h3_fl2va_pruned_int8_convrot.safetensors",
    "ref2va": "minimax_h3_ref2va_pruned_int8_convrot.safetensors",
    "unpruned": "minimax_h3_fl2va_bf16.safetensors",
    "text_encoder": "qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors",
    "vae": "minimax_h3_video_vae_fp16.safetensors",
    "vae_int8": "minimax_h3_video_vae_int8_convrot.safetensors",
    "audio_vae": "minimax_h3_audio_vae_fp32.safetensors",
}
TEXT_LAYERS = 50  # ComfyUI's Qwen3-VL-32B file stops after the decoder layer H3 reads
LATENT_STATS = ("latents_mean", "latents_std")


def transformer_names(keys: list[str]) -> str | None:
    """ "comfy" / "diffusers" for a MiniMax H3 transformer file's names; None for another model's."""
    names = set(strip_prefix(dict.fromkeys(keys)))
    if any(k.startswith("audio_patch_proj.") for k in names) and any(
        k.startswith("video_patch_proj.") for k in names
    ):
        return "comfy"
    if any(k.startswith("audio_proj_in.") for k in names) and any(
        k.startswith("token_refiner.refiner_blocks.") for k in names
    ):
        return "diffusers"
    return None


def vae_kind(keys: list[str]) -> str | None:
    """ "video" or "audio" for a MiniMax H3 VAE file (ComfyUI's or diffusers' names); None otherwise."""
    names = set(strip_prefix(dict.fromkeys(keys)))
    if "decoder.transformer_blocks.0.scale1" in names and any(k.startswith("encoder.down") for k in names):
        return "video"
    if "pre_block.attn.zero_k_bias" in names:
        return "audio"
    return None


# --- transformer --------------------------------------------------------------------------------------

_TOP = (  # diffusers -> ComfyUI, the inverse of diffusers' MINIMAX_H3_KEYS_RENAME_DICT
    ("token_refiner.refiner_blocks.", "token_refiner.blocks."),
    ("time_embedder.linear_1.", "time_embedder.proj_in."),
    ("time_embedder.linear_2.", "time_embedder.proj_out."),
    ("audio_proj_in.", "audio_patch_proj."),
    ("proj_in.", "video_patch_proj."),
    ("context_embedder.", "condition_proj."),
    ("norm_out.norm.", "final_layer.norm."),
    ("norm_out.linear.", "final_layer.adaln_proj.linear."),
    ("audio_proj_out.", "final_layer.audio_out."),
    ("proj_out.", "final_layer.video_out."),
)
_INNER = (
    (".attn.norm_q.", ".attn.q_norm."),
    (".attn.norm_k.", ".attn.k_norm."),
    (".attn.to_out.0.", ".attn.out_proj."),
    (".ff.net.0.proj.", ".mlp.fc1."),
    (".ff.net.2.", ".mlp.fc2."),
)


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    first, second = t.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def transformer_from_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict:
    """A diffusers H3 transformer state in ComfyUI's names (the file a ComfyUI user has), with the rotary
    `rope.inv_freq` buffer ComfyUI's model carries."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if re.search(r"\.attn\.to_[kv]\.weight$", name):
            continue  # stacked into qkv_proj with to_q
        new = (
            "blocks." + name.removeprefix("transformer_blocks.") if name.startswith("transformer_") else name
        )
        for old, comfy in _TOP:
            if new.startswith(old):
                new = comfy + new.removeprefix(old)
                break
        for old, comfy in _INNER:
            new = new.replace(old, comfy)
        if name.endswith(".attn.to_q.weight"):
            base = name.removesuffix("to_q.weight")
            out[new.replace(".attn.to_q.", ".attn.qkv_proj.")] = torch.cat(
                [state[base + f"to_{p}.weight"] for p in "qkv"], dim=0
            )
        elif name.endswith(".ff.net.0.proj.weight"):
            out[new] = _swap_halves(t)  # diffusers' SwiGLU reads [value; gate], the file stores [gate; value]
        else:
            out[new] = t
    dim = int(config["rope_freq_dim"])
    out["rope.inv_freq"] = 1.0 / float(config["rope_theta"]) ** (
        torch.arange(0, 2 * dim, 2).float() / (2 * dim)
    )
    return out


# --- video VAE ----------------------------------------------------------------------------------------


def _video_rename(name: str) -> str:
    """One ComfyUI (original) video VAE name in diffusers' names (no tensor change)."""
    if m := re.match(r"encoder\.down\.(\d+)\.(.*)$", name):
        rest = m.group(2).replace("block.", "resnets.", 1).replace("nin_shortcut.", "conv_shortcut.", 1)
        name = f"encoder.down_blocks.{m.group(1)}.{rest.replace('downsample.', 'downsamplers.0.', 1)}"
    name = name.replace("decoder.x_embedder.", "decoder.proj_in.")
    name = name.replace(".attn.to_out.", ".attn.to_out.0.")
    return name.replace(".ff.w1.", ".ff.net.0.proj.").replace(".ff.w2.", ".ff.net.2.")


def _heads(config: Mapping[str, Any]) -> tuple[int, int]:
    return int(config["decoder_num_attention_heads"]), int(config["decoder_attention_head_dim"])


def video_vae_to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict:
    """ComfyUI's video VAE state in `AutoencoderKLMiniMaxH3`'s names (the latent statistics and the unused
    mask token dropped: diffusers keeps the statistics in its config)."""
    state = strip_prefix(state)
    heads, head_dim = _heads(config)
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name in LATENT_STATS or name == "decoder.mask_token":
            continue
        if ".attn.to_qkv." in name:
            prefix, suffix = name.split(".attn.to_qkv.")
            # (heads x [q k v] x head_dim) rows -> three (heads x head_dim) blocks
            q, k, v = t.reshape(heads, 3, head_dim, *t.shape[1:]).unbind(1)
            for part, rows in zip("qkv", (q, k, v), strict=True):
                out[f"{prefix}.attn.to_{part}.{suffix}"] = rows.reshape(heads * head_dim, *t.shape[1:])
        elif ".ff.w1." in name:
            out[_video_rename(name)] = _swap_halves(t)  # [gate; up] -> diffusers' [up; gate]
        else:
            out[_video_rename(name)] = t
    return out


def video_vae_from_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict:
    heads, head_dim = _heads(config)
    inverse = {_video_rename(c): c for c in _video_comfy_names(state)}
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if m := re.match(r"(.*)\.attn\.to_q\.(weight|bias)$", name):
            prefix, suffix = m.groups()
            parts = [
                state[f"{prefix}.attn.to_{p}.{suffix}"].reshape(heads, head_dim, *t.shape[1:]) for p in "qkv"
            ]
            out[f"{prefix}.attn.to_qkv.{suffix}"] = torch.stack(parts, 1).reshape(
                3 * heads * head_dim, *t.shape[1:]
            )
        elif re.search(r"\.attn\.to_[kv]\.", name):
            continue
        elif ".ff.net.0.proj." in name:
            out[inverse[name]] = _swap_halves(t)
        else:
            out[inverse[name]] = t
    width = heads * head_dim
    out["decoder.mask_token"] = torch.zeros(1, 1, width)
    for stat in LATENT_STATS:
        out[stat] = torch.tensor(config[stat], dtype=torch.float32)
    return out


def _video_comfy_names(state: Mapping[str, torch.Tensor]) -> list[str]:
    """The ComfyUI name each diffusers name came from (the renames are one-to-one, so invert them)."""
    names = []
    for name in state:
        comfy = re.sub(r"encoder\.down_blocks\.(\d+)\.", r"encoder.down.\1.", name)
        comfy = comfy.replace(".resnets.", ".block.").replace(".conv_shortcut.", ".nin_shortcut.")
        comfy = comfy.replace(".downsamplers.0.", ".downsample.").replace(
            "decoder.proj_in.", "decoder.x_embedder."
        )
        comfy = comfy.replace(".attn.to_out.0.", ".attn.to_out.")
        names.append(comfy.replace(".ff.net.0.proj.", ".ff.w1.").replace(".ff.net.2.", ".ff.w2."))
    return names


# --- audio VAE ----------------------------------------------------------------------------------------


def audio_vae_to_diffusers(state: Mapping[str, torch.Tensor], module_keys: list[str]) -> dict:
    """ComfyUI's audio VAE (weight norms folded) in `AutoencoderKLMiniMaxH3Audio`'s names: each folded
    `weight` becomes `weight_v` = itself and `weight_g` = its norm, so the module's `v * g / |v|` is the file's
    weight again (within a float32 rounding: torch's weight-norm kernel sums the norm in its own order)."""
    state = strip_prefix(state)
    wanted = set(module_keys)
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name in LATENT_STATS:
            continue
        base = name.removesuffix(".weight")
        if name.endswith(".weight") and base + ".weight_v" in wanted:
            out[base + ".weight_v"] = t
            out[base + ".weight_g"] = torch.norm_except_dim(t, 2, 0)
        else:
            out[name] = t
    return out


def audio_vae_from_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> dict:
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.endswith(".weight_g"):
            continue
        if name.endswith(".weight_v"):
            base = name.removesuffix(".weight_v")
            out[base + ".weight"] = torch._weight_norm(t, state[base + ".weight_g"], 0)
        else:
            out[name] = t
    for stat in LATENT_STATS:
        out[stat] = torch.tensor(config[stat], dtype=torch.float32)
    return out


# --- fixtures -----------------------------------------------------------------------------------------


def curve_form(model: torch.nn.Module, comfy: dict[str, torch.Tensor], grid: int = 1025) -> dict:
    """A transformer's ComfyUI state in the pruned curve form: `adaln_t_table` = the time embedding after its
    SiLU sampled at `grid` points of t in [0, 1] (full rank: the release keeps an 8-wide basis of it), in place
    of the time embedder; the AdaLN projections stay as they are (they read that embedding)."""
    t = torch.linspace(0.0, 1.0, grid)
    with torch.no_grad():
        table = torch.nn.functional.silu(model.time_embedder(model.time_proj(t)))
    out = {k: v for k, v in comfy.items() if not k.startswith("time_embedder.")}
    return {**out, "adaln_t_table": table.float()}


def write_minimax_files(folder: Path, models: Path, *, names: Mapping[str, str] | None = None) -> Path:
    """Write the diffusers MiniMax H3 `folder` as ComfyUI's files under `models/` (plain float tensors under
    the templates' names: the fl2va transformer in the curve form the pruned release is in, and unpruned as
    `minimax_h3_fl2va_bf16.safetensors`; a folder's `transformer_ref` as the ref2va file, also curve form;
    the text encoder cut after layer 50 as ComfyUI's is); returns `models`."""
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio, MiniMaxH3Transformer3DModel
    from safetensors.torch import save_file
    from transformers import Qwen3VLForConditionalGeneration

    from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

    files = {**MINIMAX_FILES, **(names or {})}

    def save(state: dict[str, torch.Tensor], sub: str, name: str) -> None:
        (models / sub).mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(models / sub / name))

    transformer = MiniMaxH3Transformer3DModel.from_pretrained(str(folder), subfolder="transformer")
    comfy = transformer_from_diffusers(transformer.state_dict(), transformer.config)
    save(comfy, "diffusion_models", files["unpruned"])
    save(curve_form(transformer, comfy), "diffusion_models", files["transformer"])
    if (folder / "transformer_ref" / "config.json").is_file():  # the ref2va partition, pruned as released
        reference = MiniMaxH3Transformer3DModel.from_pretrained(str(folder), subfolder="transformer_ref")
        state = transformer_from_diffusers(reference.state_dict(), reference.config)
        save(curve_form(reference, state), "diffusion_models", files["ref2va"])
    encoder = Qwen3VLForConditionalGeneration.from_pretrained(str(folder), subfolder="text_encoder")
    state = text_encoder_to_comfy(encoder.state_dict(), "Qwen3VLForConditionalGeneration")
    # ComfyUI's file: the layers H3 reads and nothing after them (no final norm, no lm_head)
    unread = ("lm_head.weight", "model.norm.weight")
    kept = {k: v for k, v in state.items() if not _layer_at_or_after(k, TEXT_LAYERS) and k not in unread}
    save(kept, "text_encoders", files["text_encoder"])
    vae = AutoencoderKLMiniMaxH3.from_pretrained(str(folder), subfolder="vae")
    video = video_vae_from_diffusers(vae.state_dict(), vae.config)
    for role in ("vae", "vae_int8"):
        save(video, "vae", files[role])
    audio = AutoencoderKLMiniMaxH3Audio.from_pretrained(str(folder), subfolder="audio_vae")
    save(audio_vae_from_diffusers(audio.state_dict(), audio.config), "vae", files["audio_vae"])
    return models


def _layer_at_or_after(name: str, count: int) -> bool:
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return m is not None and int(m.group(1)) >= count
