"""Key layouts of public releases, and their translation to and from diffusers names.

Lives here: `flux_bfl_table`, `flux_bfl_to_diffusers`, `flux_diffusers_to_bfl`, `flux_config_from_shapes`.
May import: stdlib, torch.

Black Forest Labs publish Flux transformers (`flux1-dev.safetensors`, and city96's GGUF conversions) in their
own layout: fused q/k/v (`img_attn.qkv`), fused q/k/v/mlp in single blocks (`linear1`), RMSNorm `scale`, and a
final AdaLN projection that splits into (shift, scale) where diffusers splits into (scale, shift). diffusers'
`convert_flux_transformer_checkpoint_to_diffusers` hard-codes the width of the fused tensors (3072), so it
cannot read a differently sized model; this table is the same mapping, sized from the file, and read in both
directions (the demo writes the BFL layout with it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

# (BFL name, diffusers names it is the concatenation of along dim 0) per double / single block.
_DOUBLE = (
    ("img_mod.lin", ("norm1.linear",)),
    ("txt_mod.lin", ("norm1_context.linear",)),
    ("img_attn.qkv", ("attn.to_q", "attn.to_k", "attn.to_v")),
    ("txt_attn.qkv", ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj")),
    ("img_attn.proj", ("attn.to_out.0",)),
    ("txt_attn.proj", ("attn.to_add_out",)),
    ("img_mlp.0", ("ff.net.0.proj",)),
    ("img_mlp.2", ("ff.net.2",)),
    ("txt_mlp.0", ("ff_context.net.0.proj",)),
    ("txt_mlp.2", ("ff_context.net.2",)),
)
_DOUBLE_NORMS = (
    ("img_attn.norm.query_norm.scale", "attn.norm_q.weight"),
    ("img_attn.norm.key_norm.scale", "attn.norm_k.weight"),
    ("txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"),
    ("txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"),
)
_SINGLE = (
    ("linear1", ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")),
    ("linear2", ("proj_out",)),
    ("modulation.lin", ("norm.linear",)),
)
_SINGLE_NORMS = (
    ("norm.query_norm.scale", "attn.norm_q.weight"),
    ("norm.key_norm.scale", "attn.norm_k.weight"),
)
_TOP = (
    ("img_in", "x_embedder"),
    ("txt_in", "context_embedder"),
    ("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1"),
    ("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2"),
    ("vector_in.in_layer", "time_text_embed.text_embedder.linear_1"),
    ("vector_in.out_layer", "time_text_embed.text_embedder.linear_2"),
    ("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1"),
    ("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2"),
    ("final_layer.linear", "proj_out"),
)
_FINAL_ADALN = ("final_layer.adaLN_modulation.1", "norm_out.linear")  # (shift, scale) <-> (scale, shift)


def _count(keys: Mapping[str, object] | list[str], prefix: str) -> int:
    return len({k.split(".")[1] for k in keys if k.startswith(prefix)})


def flux_bfl_table(keys: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(BFL key, diffusers keys) for every weight and bias of a Flux transformer with these BFL `keys`."""
    rows: list[tuple[str, tuple[str, ...]]] = []
    for suffix in ("weight", "bias"):
        for bfl, dif in _TOP:
            if f"{bfl}.{suffix}" in keys:
                rows.append((f"{bfl}.{suffix}", (f"{dif}.{suffix}",)))
        for i in range(_count(keys, "double_blocks.")):
            for bfl, difs in _DOUBLE:
                rows.append(
                    (
                        f"double_blocks.{i}.{bfl}.{suffix}",
                        tuple(f"transformer_blocks.{i}.{d}.{suffix}" for d in difs),
                    )
                )
        for i in range(_count(keys, "single_blocks.")):
            for bfl, difs in _SINGLE:
                rows.append(
                    (
                        f"single_blocks.{i}.{bfl}.{suffix}",
                        tuple(f"single_transformer_blocks.{i}.{d}.{suffix}" for d in difs),
                    )
                )
    for i in range(_count(keys, "double_blocks.")):
        rows += [(f"double_blocks.{i}.{b}", (f"transformer_blocks.{i}.{d}",)) for b, d in _DOUBLE_NORMS]
    for i in range(_count(keys, "single_blocks.")):
        rows += [
            (f"single_blocks.{i}.{b}", (f"single_transformer_blocks.{i}.{d}",)) for b, d in _SINGLE_NORMS
        ]
    return rows


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def flux_bfl_to_diffusers(
    tensors: Mapping[str, torch.Tensor],
    *,
    split: Callable[[torch.Tensor, list[int]], tuple[torch.Tensor, ...]] | None = None,
    rows_of: Callable[[torch.Tensor], int] | None = None,
) -> dict[str, torch.Tensor]:
    """A BFL-layout Flux state dict (lazy mapping ok) in diffusers names. Fused tensors are split by rows:
    q/k/v in thirds, single blocks' linear1 as (inner, inner, inner, mlp) with inner = `img_in` rows.

    `split` and `rows_of` let GGUF data (rows of quantized blocks) be split the same way."""
    keys = list(tensors)
    split = split or (lambda t, sizes: torch.split(t, sizes, dim=0))
    rows_of = rows_of or (lambda t: t.shape[0])
    inner = rows_of(tensors["img_in.weight"])
    out: dict[str, torch.Tensor] = {}
    for bfl, difs in flux_bfl_table(keys):
        t = tensors[bfl]
        if len(difs) == 1:
            out[difs[0]] = t
            continue
        rows = rows_of(t)
        sizes = [inner] * 3 + ([rows - 3 * inner] if len(difs) == 4 else [])
        out.update(zip(difs, split(t, sizes), strict=True))
    for suffix in ("weight", "bias"):
        t = tensors.get(f"{_FINAL_ADALN[0]}.{suffix}")
        if t is not None:
            out[f"{_FINAL_ADALN[1]}.{suffix}"] = _swap_halves(t)
    return out


def flux_diffusers_to_bfl(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse: a diffusers FluxTransformer2DModel state dict in the layout of `flux1-dev.safetensors`."""
    inverse_keys = [b for b, _ in _TOP]
    blocks = {k.split(".")[1] for k in state if k.startswith("transformer_blocks.")}
    singles = {k.split(".")[1] for k in state if k.startswith("single_transformer_blocks.")}
    names = [f"{b}.weight" for b in inverse_keys] + [f"double_blocks.{i}.x" for i in blocks]
    names += [f"single_blocks.{i}.x" for i in singles]
    out: dict[str, torch.Tensor] = {}
    for bfl, difs in flux_bfl_table(names):
        if all(d in state for d in difs):
            out[bfl] = torch.cat([state[d] for d in difs], dim=0)
    # Biases of top-level layers: the table lists them only when present in `names`; add them directly.
    for bfl, dif in _TOP:
        if f"{dif}.bias" in state:
            out[f"{bfl}.bias"] = state[f"{dif}.bias"]
    for suffix in ("weight", "bias"):
        t = state.get(f"{_FINAL_ADALN[1]}.{suffix}")
        if t is not None:
            out[f"{_FINAL_ADALN[0]}.{suffix}"] = _swap_halves(t)
    return {k: v.contiguous() for k, v in out.items()}


def flux_config_from_shapes(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, object]:
    """FluxTransformer2DModel's config read off a BFL-layout file's tensor shapes (any size, dev or schnell)."""
    inner, in_channels = shapes["img_in.weight"]
    head_dim = shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0]
    return {
        "patch_size": 1,
        "in_channels": in_channels,
        "out_channels": shapes["final_layer.linear.weight"][0],
        "num_layers": _count(list(shapes), "double_blocks."),
        "num_single_layers": _count(list(shapes), "single_blocks."),
        "attention_head_dim": head_dim,
        "num_attention_heads": inner // head_dim,
        "joint_attention_dim": shapes["txt_in.weight"][1],
        "pooled_projection_dim": shapes["vector_in.in_layer.weight"][1],
        "guidance_embeds": "guidance_in.in_layer.weight" in shapes,
        "axes_dims_rope": _rope_axes(head_dim),
    }


def _rope_axes(head_dim: int) -> list[int]:
    # Flux-dev: head_dim 128 -> (16, 56, 56). Scaled: a quarter-ish for the index axis, the rest split evenly.
    if head_dim == 128:
        return [16, 56, 56]
    first = max(2, (head_dim // 8) // 2 * 2)
    rest = (head_dim - first) // 2
    return [first, rest, head_dim - first - rest]
