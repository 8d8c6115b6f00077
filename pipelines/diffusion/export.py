"""Writing an SD1.x or SDXL model as an original-format (CompVis / SGM) single-file checkpoint.

Lives here: `unet_to_original`, `vae_to_original`, `clip_to_original`, `open_clip_to_original`,
`save_sd1_single_file`, `save_sdxl_single_file`.
May import: torch, safetensors, diffusers (model classes only).

The inverse of diffusers' `convert_ldm_unet_checkpoint` / `convert_ldm_vae_checkpoint` /
`convert_ldm_clip_checkpoint` / `convert_open_clip_checkpoint` (loaders/single_file_utils.py), written for any block count and
`layers_per_block`, so tiny test models make checkpoints that load like a downloaded `.safetensors`.
Used by the single-file tests and the overhead benchmark; handy for sharing a model with other tools.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
CLIP_PREFIX = "cond_stage_model.transformer."

_UNET_TOP = {
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "conv_in": "input_blocks.0.0",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
}
_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "time_emb_proj": "emb_layers.1",
    "conv_shortcut": "skip_connection",
}
_VAE_TOP = {"conv_norm_out": "norm_out"}
_VAE_ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _rename_first(rest: str, table: dict[str, str]) -> str:
    for new, old in table.items():
        if rest == new or rest.startswith(new + "."):
            return old + rest[len(new) :]
    return rest


def unet_to_original(state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """diffusers UNet2DConditionModel keys -> `model.diffusion_model.*` (input/middle/output_blocks)."""
    per = config["layers_per_block"] + 1  # resnets (+ attentions) per level, plus the down/upsampler slot
    out: dict[str, torch.Tensor] = {}
    up_has_attention = {i: "CrossAttn" in t for i, t in enumerate(config["up_block_types"])}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] == "down_blocks":
            b, kind, j, rest = int(parts[1]), parts[2], parts[3], ".".join(parts[4:])
            if kind == "downsamplers":  # down_blocks.b.downsamplers.0.conv.* -> input_blocks.N.0.op.*
                new = f"input_blocks.{1 + b * per + per - 1}.0.op.{rest.removeprefix('conv.')}"
            elif kind == "resnets":
                new = f"input_blocks.{1 + b * per + int(j)}.0.{_rename_first(rest, _RESNET)}"
            else:
                new = f"input_blocks.{1 + b * per + int(j)}.1.{rest}"
        elif parts[0] == "mid_block":
            kind, j, rest = parts[1], int(parts[2]), ".".join(parts[3:])
            if kind == "resnets":
                new = f"middle_block.{2 * j}.{_rename_first(rest, _RESNET)}"
            else:
                new = f"middle_block.1.{rest}"
        elif parts[0] == "up_blocks":
            b, kind, j, rest = int(parts[1]), parts[2], parts[3], ".".join(parts[4:])
            if kind == "upsamplers":  # after the resnet (and attention) of the block's last layer
                slot = 2 if up_has_attention[b] else 1
                new = f"output_blocks.{b * per + per - 1}.{slot}.{rest}"
            elif kind == "resnets":
                new = f"output_blocks.{b * per + int(j)}.0.{_rename_first(rest, _RESNET)}"
            else:
                new = f"output_blocks.{b * per + int(j)}.1.{rest}"
        else:
            new = _rename_first(key, _UNET_TOP)
        out[UNET_PREFIX + new] = value
    return out


def vae_to_original(state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """diffusers AutoencoderKL keys -> `first_stage_model.*` (LDM encoder.down / decoder.up numbering)."""
    n = len(config["up_block_types"])
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        parts = key.split(".")
        side = parts[0]  # encoder | decoder | quant_conv | post_quant_conv
        new = key
        if side in ("encoder", "decoder") and parts[1] in ("down_blocks", "up_blocks"):
            i = int(parts[2]) if side == "encoder" else n - 1 - int(parts[2])
            level = "down" if side == "encoder" else "up"
            kind, rest = parts[3], ".".join(parts[5:])
            if kind == "resnets":
                new = f"{side}.{level}.{i}.block.{parts[4]}.{rest.replace('conv_shortcut', 'nin_shortcut')}"
            else:  # downsamplers.0.conv / upsamplers.0.conv
                new = f"{side}.{level}.{i}.{'downsample' if level == 'down' else 'upsample'}.{rest}"
        elif side in ("encoder", "decoder") and parts[1] == "mid_block":
            kind, j, rest = parts[2], int(parts[3]), ".".join(parts[4:])
            if kind == "resnets":
                new = f"{side}.mid.block_{j + 1}.{rest.replace('conv_shortcut', 'nin_shortcut')}"
            else:
                new = f"{side}.mid.attn_1.{_rename_first(rest, _VAE_ATTN)}"
                if value.ndim == 2:  # LDM keeps the attention projections as 1x1 convolutions
                    value = value[:, :, None, None]
        elif side in ("encoder", "decoder"):
            new = f"{side}.{_rename_first('.'.join(parts[1:]), _VAE_TOP)}"
        out[VAE_PREFIX + new] = value
    return out


def clip_to_original(state: dict[str, torch.Tensor], prefix: str = CLIP_PREFIX) -> dict[str, torch.Tensor]:
    """transformers CLIPTextModel keys -> `cond_stage_model.transformer.text_model.*`."""
    return {prefix + "text_model." + k.removeprefix("text_model."): v for k, v in state.items()}


_OPEN_CLIP_TOP = {
    "embeddings.token_embedding.weight": "token_embedding.weight",
    "embeddings.position_embedding.weight": "positional_embedding",
    "final_layer_norm.weight": "ln_final.weight",
    "final_layer_norm.bias": "ln_final.bias",
}
_OPEN_CLIP_LAYER = {
    "layer_norm1": "ln_1",
    "layer_norm2": "ln_2",
    "mlp.fc1": "mlp.c_fc",
    "mlp.fc2": "mlp.c_proj",
    "self_attn.out_proj": "attn.out_proj",
}


def open_clip_to_original(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """transformers CLIPTextModelWithProjection keys -> OpenCLIP names (`{prefix}transformer.resblocks.*`).

    OpenCLIP fuses q, k, v into `attn.in_proj_weight` and stores `text_projection` transposed.
    """
    out: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        key = key.removeprefix("text_model.")
        if key == "text_projection.weight":
            out[prefix + "text_projection"] = value.T.contiguous()
        elif key in _OPEN_CLIP_TOP:
            out[prefix + _OPEN_CLIP_TOP[key]] = value
        elif key.startswith("encoder.layers."):
            _, _, i, rest = key.split(".", 3)
            if rest.startswith("self_attn.") and rest.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                kind = rest.rsplit(".", 1)[1]  # weight | bias
                qkv.setdefault(f"{prefix}transformer.resblocks.{i}.attn.in_proj_{kind}", {})[rest] = value
            else:
                out[f"{prefix}transformer.resblocks.{i}.{_rename_first(rest, _OPEN_CLIP_LAYER)}"] = value
    for name, parts in qkv.items():
        kind = name.rsplit("_", 1)[1]
        out[name] = torch.cat([parts[f"self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")])
    return out


def save_sd1_single_file(
    unet: torch.nn.Module, vae: torch.nn.Module, text_encoder: torch.nn.Module, path: Path
) -> Path:
    """Write the three components as one original-format `.safetensors` checkpoint."""
    state: dict[str, torch.Tensor] = {}
    state.update(unet_to_original(unet.state_dict(), dict(unet.config)))
    state.update(vae_to_original(vae.state_dict(), dict(vae.config)))
    state.update(clip_to_original(text_encoder.state_dict()))
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))
    return path


def save_sdxl_single_file(
    unet: torch.nn.Module,
    vae: torch.nn.Module,
    text_encoder: torch.nn.Module,
    text_encoder_2: torch.nn.Module,
    path: Path,
) -> Path:
    """SDXL as one SGM-layout `.safetensors`: CLIP-L at `conditioner.embedders.0`, OpenCLIP at `.1`."""
    state: dict[str, torch.Tensor] = {}
    state.update(unet_to_original(unet.state_dict(), dict(unet.config)))
    state.update(vae_to_original(vae.state_dict(), dict(vae.config)))
    state.update(clip_to_original(text_encoder.state_dict(), "conditioner.embedders.0.transformer."))
    state.update(open_clip_to_original(text_encoder_2.state_dict(), "conditioner.embedders.1.model."))
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))
    return path
