"""FLUX.3's transformer names in ComfyUI's files (Black Forest Labs' own, as ComfyUI saves them) to and from
diffusers' `Flux3Transformer2DModel`.

Lives here: `is_flux3_transformer`, `to_diffusers`, `from_diffusers`. May import: stdlib, torch, diffusers (its
single-file converter).

The original names: `time_in.{in,out}_layer`, `ref_time_in.*` (a step-distilled model's target-timestep
embedder), `{early,single}_stream_modulations.<mode>.lin`, `emb_in.<mode>`, `txt_in`, `txt_mode_blocks.N` and
`content_mode_blocks.<mode>.N` and `single_blocks.N` with `{q,k,v}_proj`, `attn_out`, `norm.{query,key}_norm.scale`,
`mlp_{in,out}`, and `final_layer.image.{linear, adaLN_modulation.1}` (shift before scale, where diffusers keeps
scale first). Reading goes through diffusers' `convert_flux3_transformer_checkpoint_to_diffusers`, whose
detection keys (`model.diffusion_model.early_stream_modulations.image.lin.weight`) are ComfyUI's saved form.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

# diffusers -> original, exact names.
_EXACT = {
    "timestep_embedder.linear_1.weight": "time_in.in_layer.weight",
    "timestep_embedder.linear_2.weight": "time_in.out_layer.weight",
    "target_timestep_embedder.linear_1.weight": "ref_time_in.in_layer.weight",
    "target_timestep_embedder.linear_2.weight": "ref_time_in.out_layer.weight",
    "proj_out.weight": "final_layer.image.linear.weight",
    "norm_out.linear.weight": "final_layer.image.adaLN_modulation.1.weight",
}
# diffusers -> original, a name's start.
_PREFIXES = (
    ("x_embedders.", "emb_in."),
    ("context_embedder.", "txt_in."),
    ("mode_blocks.", "content_mode_blocks."),
    ("single_transformer_blocks.", "single_blocks."),
)
# diffusers -> original, a block tensor's end.
_SUFFIXES = (
    ("attn.to_q.weight", "q_proj.weight"),
    ("attn.to_k.weight", "k_proj.weight"),
    ("attn.to_v.weight", "v_proj.weight"),
    ("attn.to_out.0.weight", "attn_out.weight"),
    ("attn.norm_q.weight", "norm.query_norm.scale"),
    ("attn.norm_k.weight", "norm.key_norm.scale"),
    ("ff.linear_in.weight", "mlp_in.weight"),
    ("ff.linear_out.weight", "mlp_out.weight"),
)


def is_flux3_transformer(names: set[str]) -> tuple[str, str] | None:
    """("flux3", "comfy" | "diffusers") when these (prefix-stripped) names are a FLUX.3 transformer."""
    if not any(k.startswith("early_stream_modulations.") for k in names):
        return None
    return "flux3", "diffusers" if any(k.startswith("x_embedders.") for k in names) else "comfy"


def to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A FLUX.3 transformer state in the original names (stubs or tensors) in diffusers' names."""
    from diffusers.loaders.single_file_utils import convert_flux3_transformer_checkpoint_to_diffusers

    return convert_flux3_transformer_checkpoint_to_diffusers(dict(state))  # it pops: give it a copy


def from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers FLUX.3 transformer state in the original names (the file a ComfyUI user has)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name in _EXACT:
            if name == "norm_out.linear.weight":
                scale, shift = t.chunk(2, dim=0)
                t = torch.cat([shift, scale], dim=0)
            out[_EXACT[name]] = t
            continue
        new = name
        for old, original in _PREFIXES:
            if new.startswith(old):
                new = original + new[len(old) :]
                break
        if "_modulations." in new:
            new = new.replace(".linear.weight", ".lin.weight")
        for old, original in _SUFFIXES:
            if new.endswith(old):
                new = new[: -len(old)] + original
                break
        out[new] = t
    return out
