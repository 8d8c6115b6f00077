"""Writing a FLUX.1 or SD3 model as ComfyUI's all-in-one checkpoint (what CheckpointLoaderSimple reads).

Lives here: `sd3_transformer_to_original`, `clip_to_comfy`, `t5_to_comfy`, `save_flux_single_file`,
`save_sd3_single_file`, `ALL_IN_ONE_PREFIXES`. May import: torch, safetensors, pipelines.diffusion.export,
pipelines.quant.layouts (the FLUX.1 BFL table, torch only).

The layout is ComfyUI's `state_dict_for_saving` (comfy/model_base.py, comfy/supported_models.py): the
transformer in its release names under `model.diffusion_model.` (FLUX.1: Black Forest Labs' fused q/k/v;
SD3: Stability's MMDiT `joint_blocks`), each text encoder in transformers' names under
`text_encoders.<clip_l|clip_g|t5xxl>.transformer.`, the VAE in the LDM layout under `vae.` (FLUX.1) or
`first_stage_model.` (SD3, the base class's prefix). The transformer inverses are the exact inverses of
diffusers' `convert_flux_transformer_checkpoint_to_diffusers` / `convert_sd3_transformer_checkpoint_to_diffusers`
(tests/test_single_file_flow.py checks both round trips), written for any size so tiny demos make files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipelines.diffusion.export import VAE_PREFIX, vae_to_original

DENOISER_PREFIX = "model.diffusion_model."
# Text encoder prefixes of ComfyUI's all-in-one files, per our family's slot order.
ALL_IN_ONE_PREFIXES = {
    "flux1": ("text_encoders.clip_l.transformer.", "text_encoders.t5xxl.transformer."),
    "sd3": (
        "text_encoders.clip_l.transformer.",
        "text_encoders.clip_g.transformer.",
        "text_encoders.t5xxl.transformer.",
    ),
}
# The VAE's prefix: ComfyUI's Flux class sets `vae_key_prefix = ["vae."]`; SD3 keeps the base `first_stage_model.`.
VAE_PREFIXES = {"flux1": "vae.", "sd3": VAE_PREFIX}


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)  # (scale, shift) <-> (shift, scale): its own inverse
    return torch.cat([b, a], dim=0)


def sd3_transformer_to_original(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers `SD3Transformer2DModel` state dict in Stability's MMDiT names (no prefix)."""
    out: dict[str, torch.Tensor] = {}

    def put(original: str, diffusers: str, *, swap: bool = False) -> None:
        for suffix in ("weight", "bias"):
            t = state.get(f"{diffusers}.{suffix}")
            if t is not None:
                out[f"{original}.{suffix}"] = _swap_halves(t) if swap else t

    def fused(original: str, parts: tuple[str, ...]) -> None:
        for suffix in ("weight", "bias"):
            out[f"{original}.{suffix}"] = torch.cat([state[f"{p}.{suffix}"] for p in parts], dim=0)

    out["pos_embed"] = state["pos_embed.pos_embed"]
    put("x_embedder.proj", "pos_embed.proj")
    put("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1")
    put("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2")
    put("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1")
    put("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2")
    put("context_embedder", "context_embedder")
    blocks = sorted({int(k.split(".")[1]) for k in state if k.startswith("transformer_blocks.")})
    for i in blocks:
        d, x, c = f"transformer_blocks.{i}.", f"joint_blocks.{i}.x_block.", f"joint_blocks.{i}.context_block."
        last = i == blocks[-1]  # its context stream is "pre only": no output projection nor MLP
        fused(f"{x}attn.qkv", tuple(f"{d}attn.to_{n}" for n in "qkv"))
        fused(f"{c}attn.qkv", tuple(f"{d}attn.add_{n}_proj" for n in "qkv"))
        for original, ours in (
            (f"{x}attn.ln_q", "attn.norm_q"),
            (f"{x}attn.ln_k", "attn.norm_k"),
            (f"{c}attn.ln_q", "attn.norm_added_q"),
            (f"{c}attn.ln_k", "attn.norm_added_k"),
            (f"{x}attn2.ln_q", "attn2.norm_q"),
            (f"{x}attn2.ln_k", "attn2.norm_k"),
        ):
            put(original, d + ours)
        put(f"{x}attn.proj", f"{d}attn.to_out.0")
        if f"{d}attn2.to_q.weight" in state:  # SD3.5 Medium's dual-attention blocks
            fused(f"{x}attn2.qkv", tuple(f"{d}attn2.to_{n}" for n in "qkv"))
            put(f"{x}attn2.proj", f"{d}attn2.to_out.0")
        put(f"{x}adaLN_modulation.1", f"{d}norm1.linear")
        put(f"{c}adaLN_modulation.1", f"{d}norm1_context.linear", swap=last)
        put(f"{x}mlp.fc1", f"{d}ff.net.0.proj")
        put(f"{x}mlp.fc2", f"{d}ff.net.2")
        if not last:
            put(f"{c}attn.proj", f"{d}attn.to_add_out")
            put(f"{c}mlp.fc1", f"{d}ff_context.net.0.proj")
            put(f"{c}mlp.fc2", f"{d}ff_context.net.2")
    put("final_layer.linear", "proj_out")
    put("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return out


def clip_to_comfy(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """A transformers CLIP text model (flat or with `text_model.`, with or without projection) under `prefix`
    in ComfyUI's names: `text_model.*` and `text_projection.weight`."""
    out = {}
    for key, value in state.items():
        name = key if key == "text_projection.weight" else "text_model." + key.removeprefix("text_model.")
        out[prefix + name] = value
    return out


def t5_to_comfy(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """A transformers T5 encoder under `prefix`; its embedding stored once, as `shared` (ComfyUI's T5 has no
    `encoder.embed_tokens`)."""
    return {prefix + k: v for k, v in state.items() if k != "encoder.embed_tokens.weight"}


def _vae(vae: torch.nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    state = vae_to_original(vae.state_dict(), dict(vae.config))
    return {prefix + k.removeprefix(VAE_PREFIX): v for k, v in state.items()}


def _save(state: dict[str, torch.Tensor], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))
    return path


def save_flux_single_file(
    transformer: torch.nn.Module,
    vae: torch.nn.Module,
    text_encoder: torch.nn.Module,
    text_encoder_2: torch.nn.Module,
    path: Path,
) -> Path:
    """FLUX.1 as ComfyUI's `flux1-schnell-fp8.safetensors` lays it out (here in the models' own dtype)."""
    from pipelines.quant.layouts import flux_diffusers_to_bfl

    clip_l, t5 = ALL_IN_ONE_PREFIXES["flux1"]
    state = {DENOISER_PREFIX + k: v for k, v in flux_diffusers_to_bfl(transformer.state_dict()).items()}
    state.update(clip_to_comfy(text_encoder.state_dict(), clip_l))
    state.update(t5_to_comfy(text_encoder_2.state_dict(), t5))
    state.update(_vae(vae, VAE_PREFIXES["flux1"]))
    return _save(state, path)


def save_sd3_single_file(
    transformer: torch.nn.Module,
    vae: torch.nn.Module,
    text_encoders: tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module],
    path: Path,
) -> Path:
    """SD3 / SD3.5 as ComfyUI's `sd3.5_large_fp8_scaled.safetensors` lays it out (CLIP-L, CLIP-G, T5-XXL)."""
    clip_l, clip_g, t5 = ALL_IN_ONE_PREFIXES["sd3"]
    state = {DENOISER_PREFIX + k: v for k, v in sd3_transformer_to_original(transformer.state_dict()).items()}
    state.update(clip_to_comfy(text_encoders[0].state_dict(), clip_l))
    state.update(clip_to_comfy(text_encoders[1].state_dict(), clip_g))
    state.update(t5_to_comfy(text_encoders[2].state_dict(), t5))
    state.update(_vae(vae, VAE_PREFIXES["sd3"]))
    return _save(state, path)
