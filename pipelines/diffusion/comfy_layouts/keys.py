"""Tensor names of ComfyUI's files for the 2026 families, to and from diffusers' names.

Lives here: `LAYOUTS` (family -> its transformer layout name), `transformer_to_diffusers`,
`transformer_from_diffusers`, `wan_vae_table`, `vae_to_diffusers`, `vae_from_diffusers`, `strip_prefix` (from `comfy_layouts.prefix`).
May import: stdlib, torch, diffusers (its single-file converters), comfy_layouts.wan22_vae (Wan 2.2's VAE table).

Reading goes through diffusers' own converters where they exist (`convert_z_image_transformer_checkpoint_to_
diffusers`, `convert_flux2_transformer_checkpoint_to_diffusers`, `convert_wan_transformer_to_diffusers`); they
work on any mapping of tensors, so the loader runs them on header stubs (`lazy_load.trace_conversion`) or on a
GGUF file's quantized tensors. Qwen-Image's ComfyUI names are diffusers' names. The Wan VAE converter in
diffusers hard-codes the released VAE's block counts, so the Wan/Qwen-Image VAE goes through `wan_vae_table`,
the same mapping sized from the module's own names. The `*_from_diffusers` functions are the inverse, used to
write fixtures in ComfyUI's layout; a test checks that each round trip gives the diffusers names back.

ComfyUI's names (comfy/model_detection.py): Z-Image `cap_embedder.1.weight`, `noise_refiner.N.attention.qkv`;
FLUX.2 `double_stream_modulation_img.lin`, `double_blocks.N.img_attn.qkv`, `single_blocks.N.linear1`; Wan
`head.modulation`, `blocks.N.self_attn.q`; Qwen-Image `txt_norm.weight`, `transformer_blocks.N`. Files may
carry ComfyUI's `model.diffusion_model.` prefix (as saved by its model-save nodes): `strip_prefix`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from pipelines.diffusion.comfy_layouts.prefix import strip_prefix
from pipelines.diffusion.comfy_layouts.wan22_vae import (
    WAN_RESNET,
    is_wan22_vae,
    wan22_vae_table,
    wan_resnet_name,
    wan_vae_shared_name,
)

# The diffusers transformer key layout each family's ComfyUI file is in.
LAYOUTS = {
    "zimage": "zimage",
    "qwenimage": "qwenimage",
    "qwenimage_edit": "qwenimage",  # Qwen-Image-Edit: Qwen-Image's transformer, the same tensors
    "flux2_klein": "flux2",
    "flux2_dev": "flux2",
    "wan": "wan",
    "qwenimage21": "qwenimage21",
    "minimax": "minimax",  # comfy_layouts.minimax_keys
    "krea2": "krea2",
    "flux3": "flux3",
}


def transformer_to_diffusers(layout: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ComfyUI-layout transformer state (stubs, GGUF or real tensors) in diffusers' names."""
    from diffusers.loaders import single_file_utils as sfu

    state = strip_prefix(state)
    if layout == "zimage":
        return sfu.convert_z_image_transformer_checkpoint_to_diffusers(state)
    if layout == "flux2":
        return sfu.convert_flux2_transformer_checkpoint_to_diffusers(state)
    if layout == "wan":
        converted = sfu.convert_wan_transformer_to_diffusers(state)
        # FLF2V's first/last-frame positions: diffusers' conversion script maps them, its single-file
        # converter leaves the name as it is.
        if "img_emb.emb_pos" in converted:
            converted["condition_embedder.image_embedder.pos_embed"] = converted.pop("img_emb.emb_pos")
        return converted
    if layout == "qwenimage":
        return state
    if layout == "qwenimage21":  # diffusers' names with the SwiGLU gate and up fused, gate rows first
        return sfu.convert_qwen_image21_transformer_checkpoint_to_diffusers(dict(state))
    if layout == "minimax":
        from pipelines.diffusion.comfy_layouts.minimax_keys import transformer_to_diffusers as minimax_names

        return minimax_names(state)
    if layout == "krea2":
        from pipelines.diffusion.comfy_layouts import krea2_keys

        return krea2_keys.to_diffusers(state)
    if layout == "flux3":
        from pipelines.diffusion.comfy_layouts import flux3_keys

        return flux3_keys.to_diffusers(state)
    raise ValueError(f"unknown transformer layout {layout!r}")


# --- the inverse (fixtures) ---------------------------------------------------------------------------


def _cat(state: Mapping[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([state[n] for n in names], dim=0)


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    scale, shift = t.chunk(2, dim=0)  # diffusers (scale, shift) -> the original (shift, scale)
    return torch.cat([shift, scale], dim=0)


def _zimage_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if re.search(r"\.attention\.to_[kv]\.weight$", name):
            continue  # joined into qkv with to_q
        if name.endswith(".attention.to_q.weight"):
            base = name.removesuffix("to_q.weight")
            out[base + "qkv.weight"] = _cat(state, [base + f"to_{p}.weight" for p in "qkv"])
            continue
        new = name.replace("all_final_layer.2-1.", "final_layer.").replace(
            "all_x_embedder.2-1.", "x_embedder."
        )
        new = new.replace(".attention.to_out.0.", ".attention.out.")
        new = new.replace(".attention.norm_k.", ".attention.k_norm.").replace(
            ".attention.norm_q.", ".attention.q_norm."
        )
        out[new] = t
    return out


_FLUX2_TOP = {
    "x_embedder": "img_in",
    "context_embedder": "txt_in",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
    "proj_out": "final_layer.linear",
}
_FLUX2_DOUBLE = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
    "attn.to_out.0": "img_attn.proj",
    "attn.to_add_out": "txt_attn.proj",
    "ff.linear_in": "img_mlp.0",
    "ff.linear_out": "img_mlp.2",
    "ff_context.linear_in": "txt_mlp.0",
    "ff_context.linear_out": "txt_mlp.2",
}
_FLUX2_SINGLE = {
    "attn.to_qkv_mlp_proj": "linear1",
    "attn.to_out": "linear2",
    "attn.norm_q.weight": "norm.query_norm.scale",
    "attn.norm_k.weight": "norm.key_norm.scale",
}


def _rename_within(rest: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        if rest == old or rest.startswith(old + "."):
            return new + rest[len(old) :]
    raise KeyError(rest)


def _flux2_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.startswith("norm_out.linear."):
            out["final_layer.adaLN_modulation.1." + name.rsplit(".", 1)[1]] = _swap_halves(t)
            continue
        double = re.match(r"transformer_blocks\.(\d+)\.(.*)$", name)
        single = re.match(r"single_transformer_blocks\.(\d+)\.(.*)$", name)
        if double:
            i, rest = double.groups()
            fused = re.match(r"attn\.(to|add)_(q|k|v)(_proj)?\.(weight|bias)$", rest)
            if fused:
                stream, part, _, kind = fused.groups()
                if part != "q":
                    continue  # joined into qkv with q
                names = (
                    [f"transformer_blocks.{i}.attn.to_{p}.{kind}" for p in "qkv"]
                    if stream == "to"
                    else [f"transformer_blocks.{i}.attn.add_{p}_proj.{kind}" for p in "qkv"]
                )
                side = "img" if stream == "to" else "txt"
                out[f"double_blocks.{i}.{side}_attn.qkv.{kind}"] = _cat(state, names)
                continue
            out[f"double_blocks.{i}.{_rename_within(rest, _FLUX2_DOUBLE)}"] = t
        elif single:
            i, rest = single.groups()
            out[f"single_blocks.{i}.{_rename_within(rest, _FLUX2_SINGLE)}"] = t
        else:
            out[_rename_within(name, _FLUX2_TOP)] = t
    return out


_WAN_RENAMES = (  # diffusers -> ComfyUI, applied in order (the inverse of diffusers' rename dict)
    ("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
    ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
    ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
    ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
    ("condition_embedder.time_proj", "time_projection.1"),
    ("condition_embedder.image_embedder.norm1", "img_emb.proj.0"),
    ("condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"),
    ("condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"),
    ("condition_embedder.image_embedder.norm2", "img_emb.proj.4"),
    ("condition_embedder.image_embedder.pos_embed", "img_emb.emb_pos"),  # FLF2V: the two frames' positions
    ("attn1", "self_attn"),
    ("attn2", "cross_attn"),
    (".to_out.0.", ".o."),
    (".to_q.", ".q."),
    (".to_k.", ".k."),
    (".to_v.", ".v."),
    (".add_k_proj.", ".k_img."),
    (".add_v_proj.", ".v_img."),
    (".norm_added_k.", ".norm_k_img."),
    ("ffn.net.0.proj", "ffn.0"),
    ("ffn.net.2", "ffn.2"),
)


def _wan_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name == "scale_shift_table":
            out["head.modulation"] = t
            continue
        if name.startswith("proj_out."):
            out["head.head." + name.removeprefix("proj_out.")] = t
            continue
        new = name
        for old, comfy in _WAN_RENAMES:
            new = new.replace(old, comfy)
        new = new.replace(".scale_shift_table", ".modulation")
        # diffusers swapped norm2 and norm3 of each block; swap them back.
        new = re.sub(r"\.norm([23])\.", lambda m: ".norm" + ("3" if m.group(1) == "2" else "2") + ".", new)
        out[new] = t
    return out


def transformer_from_diffusers(layout: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers transformer state in ComfyUI's names (the file a ComfyUI user has)."""
    if layout == "zimage":
        return _zimage_from_diffusers(state)
    if layout == "flux2":
        return _flux2_from_diffusers(state)
    if layout == "wan":
        return _wan_from_diffusers(state)
    if layout == "qwenimage":
        return dict(state)
    if layout == "qwenimage21":
        return _qwen21_from_diffusers(state)
    if layout == "krea2":
        from pipelines.diffusion.comfy_layouts import krea2_keys

        return krea2_keys.from_diffusers(state)
    if layout == "flux3":
        from pipelines.diffusion.comfy_layouts import flux3_keys

        return flux3_keys.from_diffusers(state)
    raise ValueError(f"unknown transformer layout {layout!r}")


def _qwen21_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Qwen-Image 2.1's SwiGLU gate and up projections fused as ComfyUI stores them (`img_mlp.gate_up`)."""
    out = {
        k: v for k, v in state.items() if not k.endswith(("img_mlp.gate_layer.weight", "img_mlp.proj.weight"))
    }
    for key in [k for k in state if k.endswith("img_mlp.gate_layer.weight")]:
        up = state[key.replace("gate_layer", "proj")]
        out[key.replace("gate_layer", "gate_up")] = torch.cat([state[key], up], dim=0)
    return out


# --- VAEs ---------------------------------------------------------------------------------------------


def _wan21_stage_name(rest: str, starts: dict[int, int], per_stage: dict[int, int]) -> str | None:
    """A Wan 2.1 down/up stage key (`rest`: the key after `encoder.`/`decoder.`) in the original flat lists."""
    if m := re.match(r"down_blocks\.(\d+)\.(.*)$", rest):
        tail = m.group(2)
        is_resnet = tail.split(".")[0] in WAN_RESNET
        return f"encoder.downsamples.{m.group(1)}.{wan_resnet_name(tail) if is_resnet else tail}"
    if m := re.match(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)$", rest):
        stage, j = int(m.group(1)), int(m.group(2))
        return f"decoder.upsamples.{starts[stage] + j}.{wan_resnet_name(m.group(3))}"
    if m := re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.(.*)$", rest):
        stage = int(m.group(1))
        return f"decoder.upsamples.{starts[stage] + per_stage[stage]}.{m.group(2)}"
    return None


def wan_vae_table(diffusers_keys: list[str]) -> dict[str, str]:
    """ComfyUI (original Wan) VAE name -> diffusers `AutoencoderKLWan` / `AutoencoderKLQwenImage` name.

    The original keeps flat lists: `encoder.downsamples.K` (the same flat order as diffusers' down_blocks)
    and `decoder.upsamples.K`, where each up stage is its resnets then one upsampler (none after the last).
    Wan 2.2's VAE (residual stages, nested lists) has its own table (`wan22_vae`).
    """
    if is_wan22_vae(diffusers_keys):
        return wan22_vae_table(diffusers_keys)
    per_stage: dict[int, int] = {}
    for k in diffusers_keys:
        m = re.match(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.", k)
        if m:
            per_stage[int(m.group(1))] = max(per_stage.get(int(m.group(1)), 0), int(m.group(2)) + 1)
    starts, at = {}, 0
    for stage in sorted(per_stage):
        starts[stage] = at
        at += per_stage[stage] + 1  # its resnets and its upsampler
    table: dict[str, str] = {}
    for k in diffusers_keys:
        side, _, rest = k.partition(".")
        orig = wan_vae_shared_name(k) or _wan21_stage_name(rest, starts, per_stage)
        if orig is None:
            raise KeyError(f"no Wan VAE name for {k!r}")
        table[orig] = k
    return table


def vae_to_diffusers(
    layout: str, state: Mapping[str, torch.Tensor], config: dict, module_keys: list[str]
) -> dict[str, torch.Tensor]:
    """A ComfyUI VAE state in diffusers' names: "wan" (Wan 2.1 and Qwen-Image) or "ldm" (Flux / FLUX.2)."""
    state = strip_prefix(state)
    if layout == "wan":
        table = wan_vae_table(module_keys)
        return {table.get(k, k): v for k, v in state.items()}
    if layout == "diffusers":  # Qwen-Image 2.1's VAE, read in diffusers' names
        return dict(state)
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    # FLUX.2's batch-norm statistics have the same name in both layouts; the converter drops them.
    kept = {k: v for k, v in state.items() if k.startswith("bn.")}
    return {**convert_ldm_vae_checkpoint(dict(state), config), **kept}


def vae_from_diffusers(
    layout: str, state: Mapping[str, torch.Tensor], config: dict
) -> dict[str, torch.Tensor]:
    if layout == "wan":
        inverse = {d: o for o, d in wan_vae_table(list(state)).items()}
        return {inverse[k]: v for k, v in state.items()}
    if layout == "diffusers":
        return dict(state)
    from pipelines.diffusion.export import vae_to_original

    kept = {k: v for k, v in state.items() if k.startswith("bn.")}
    ldm = vae_to_original({k: v for k, v in state.items() if not k.startswith("bn.")}, config)
    return {**{k.removeprefix("first_stage_model."): v for k, v in ldm.items()}, **kept}
