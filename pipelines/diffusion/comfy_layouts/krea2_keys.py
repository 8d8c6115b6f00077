"""Krea 2's transformer names: ComfyUI's `SingleStreamDiT` (comfy/ldm/krea2/model.py) to and from diffusers'
`Krea2Transformer2DModel` (split from `krea2` so that `keys` can read them without an import cycle).

Lives here: `is_krea2_transformer`, `to_diffusers`, `from_diffusers`. May import: stdlib, torch, diffusers (its
single-file converter).

ComfyUI's names: `first`, `tmlp.0/2`, `tproj.1`, `txtfusion.{layerwise,refiner}_blocks.N`, `txtfusion.projector`,
`txtmlp.0.scale` (an RMSNorm) / `.1` / `.3`, `blocks.N.{mod.lin, prenorm.scale, postnorm.scale, attn.{wq, wk,
wv, gate, wo, qknorm.qnorm.scale, qknorm.knorm.scale}, mlp.{gate, up, down}}`, `last.{norm.scale, linear,
modulation.lin}`. Both sides keep the norms' zero-centred scales (`1 + weight`), so only names change, and each
block's six modulation vectors, which ComfyUI stores flat (6 x width), become diffusers' (6, width) table.
Reading goes through diffusers' `convert_krea2_transformer_checkpoint_to_diffusers`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

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
