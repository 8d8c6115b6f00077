"""A GGUF file's tensors repacked for the compact decoder, and the decoder built from them.

Lives here: `pack_gguf_tensors` (GGUF -> a flat dict of packed tensors, what the cache stores),
`compact_from_packed` (that dict -> `CompactLM` with packed layers), `compact_from_float` (a transformers
float state dict -> `CompactLM` with `nn.Linear`s, for checks against transformers).
Imports numpy, torch, gguf-py and `pipelines.llm.{compact_model,packed_linear,gguf_loader}`.

Names in the packed dict: `embed`, `lm_head` (absent when tied to the embedding), `norm.weight`, and per
block `blk.N.{wqkv,wo,w13,w2}` plus `blk.N.{attn_norm,ffn_norm}.weight`, `blk.N.wqkv.bias` (Qwen2),
`blk.N.{q_norm,k_norm}.weight` (Qwen3, Gemma 3) and `blk.N.{post_attn_norm,post_ffn_norm}.weight` (Gemma 3);
a packed weight is two tensors, `<name>.int4` + `<name>.int4_aux` or `<name>.int8` + `<name>.int8_aux`.
q/k/v and gate/up are fused into one matmul each (gpt-fast's wqkv/w13): fewer, larger kernel calls.
Norm weights are held as the compact decoder multiplies them: a GGUF's as stored (llama.cpp already wrote
Gemma's as 1 + w), a transformers Gemma state dict's plus one.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from torch import nn

from pipelines.llm.compact_model import MLP, Attention, Block, CompactConfig, CompactLM, RMSNorm
from pipelines.llm.gguf_loader import _ARCHITECTURES, GGUFContents, UnsupportedGGUFError, unpermute_qk
from pipelines.llm.packed_linear import (
    PackedEmbedding,
    PackedLinear,
    PackedWeight,
    packed_from_tensors,
    repack_blocks,
)

_F32 = GGMLQuantizationType.F32
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16)


def _pack_rows(
    parts: list[tuple[np.ndarray, GGMLQuantizationType, tuple[int, int]]], prefer: str = "auto"
) -> PackedWeight:
    """Several GGUF tensors with the same K, stacked by rows into one packed weight."""
    k = parts[0][2][1]
    n = sum(shape[0] for _, _, shape in parts)
    types = {qtype for _, qtype, _ in parts}
    if len(types) == 1 and next(iter(types)) not in _FLOAT_TYPES:
        rows = np.concatenate([rows for rows, _, _ in parts], axis=0)
        return repack_blocks(rows, next(iter(types)), (n, k), prefer=prefer)
    floats = [dequantize(rows, qtype).astype(np.float32).reshape(shape) for rows, qtype, shape in parts]
    return repack_blocks(np.concatenate(floats, axis=0), _F32, (n, k), prefer=prefer)


def pack_gguf_tensors(contents: GGUFContents, config: CompactConfig) -> dict[str, torch.Tensor]:
    """Every tensor of the file, repacked (weights) or as float32 (norms, biases)."""
    _, permuted = _ARCHITECTURES[contents.architecture]
    by_name = {t.name: t for t in contents.reader.tensors}

    def part(name: str, heads: int = 0) -> tuple[np.ndarray, GGMLQuantizationType, tuple[int, int]]:
        if name not in by_name:
            raise UnsupportedGGUFError(f"{contents.path.name}: tensor {name!r} is missing")
        t = by_name[name]
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))  # (out, in), as transformers has it
        rows = np.asarray(t.data).reshape(shape[0], -1)
        if permuted and heads:
            rows = unpermute_qk(rows, heads)  # whole rows move: valid on blocks as on floats
        return rows, t.tensor_type, shape  # type: ignore[return-value]

    def floats(name: str) -> torch.Tensor:
        t = by_name[name]
        return torch.from_numpy(dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1))

    state: dict[str, torch.Tensor] = {}
    embed = _pack_rows([part("token_embd.weight")], prefer="int8")
    state.update(embed.tensors("embed"))
    if "output.weight" in by_name:
        state.update(_pack_rows([part("output.weight")]).tensors("lm_head"))
    state["norm.weight"] = floats("output_norm.weight")
    for i in range(config.layers):
        b = f"blk.{i}"
        qkv = [part(f"{b}.attn_q.weight", config.heads), part(f"{b}.attn_k.weight", config.kv_heads)]
        state.update(_pack_rows([*qkv, part(f"{b}.attn_v.weight")]).tensors(f"{b}.wqkv"))
        state.update(_pack_rows([part(f"{b}.attn_output.weight")]).tensors(f"{b}.wo"))
        state.update(
            _pack_rows([part(f"{b}.ffn_gate.weight"), part(f"{b}.ffn_up.weight")]).tensors(f"{b}.w13")
        )
        state.update(_pack_rows([part(f"{b}.ffn_down.weight")]).tensors(f"{b}.w2"))
        for ours, theirs in _GGUF_NORMS.items():
            if f"{b}.{theirs}.weight" in by_name:
                state[f"{b}.{ours}.weight"] = floats(f"{b}.{theirs}.weight")
        if f"{b}.attn_q.bias" in by_name:
            state[f"{b}.wqkv.bias"] = torch.cat([floats(f"{b}.attn_{x}.bias") for x in "qkv"])
    return state


# our per-block norm names -> the GGUF file's (for Gemma 3 `ffn_norm` is its pre-feed-forward norm)
_GGUF_NORMS = {
    "attn_norm": "attn_norm",
    "ffn_norm": "ffn_norm",
    "q_norm": "attn_q_norm",
    "k_norm": "attn_k_norm",
    "post_attn_norm": "post_attention_norm",
    "post_ffn_norm": "post_ffw_norm",
}


def _block(
    config: CompactConfig,
    layer: int,
    linears: tuple[nn.Module, nn.Module, nn.Module, nn.Module],
    norms: dict[str, torch.Tensor],
) -> Block:
    """One block from its four linear layers (wqkv, wo, w13, w2) and its norm weights by our names."""

    def norm(name: str) -> RMSNorm | None:
        return RMSNorm(norms[name], config.rms_eps) if name in norms else None

    wqkv, wo, w13, w2 = linears
    window = config.sliding_window if config.is_local(layer) else 0
    attention = Attention(config, wqkv, wo, norm("q_norm"), norm("k_norm"), window=window)
    return Block(
        attention,
        MLP(config, w13, w2),
        RMSNorm(norms["attn_norm"], config.rms_eps),
        RMSNorm(norms["ffn_norm"], config.rms_eps),
        norm("post_attn_norm"),
        norm("post_ffn_norm"),
    )


def _packed(state: dict[str, torch.Tensor], name: str) -> PackedWeight:
    for kind in ("int4", "int8"):
        if f"{name}.{kind}" in state:
            return packed_from_tensors(kind, state[f"{name}.{kind}"], state[f"{name}.{kind}_aux"])
    raise KeyError(f"no packed weight {name!r} in the cache")


def compact_from_packed(state: dict[str, torch.Tensor], config: CompactConfig) -> CompactLM:
    """The decoder with packed layers; a tied output layer shares the embedding's tensors."""
    embed_weight = _packed(state, "embed")
    lm_head = PackedLinear(
        _packed(state, "lm_head") if "lm_head.int4" in state or "lm_head.int8" in state else embed_weight
    )
    blocks = []
    for i in range(config.layers):
        b = f"blk.{i}"
        linears = (
            PackedLinear(_packed(state, f"{b}.wqkv"), state.get(f"{b}.wqkv.bias")),
            PackedLinear(_packed(state, f"{b}.wo")),
            PackedLinear(_packed(state, f"{b}.w13")),
            PackedLinear(_packed(state, f"{b}.w2")),
        )
        norms = {n: state[f"{b}.{n}.weight"] for n in _GGUF_NORMS if f"{b}.{n}.weight" in state}
        blocks.append(_block(config, i, linears, norms))
    model = CompactLM(
        config, PackedEmbedding(embed_weight), blocks, RMSNorm(state["norm.weight"], config.rms_eps), lm_head
    )
    return model.eval()


def _linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias, requires_grad=False)
    return layer


# transformers' per-block norm names -> ours (Llama's post_attention_layernorm is its pre-MLP norm; Gemma's
# is after attention, and its pre-MLP norm is pre_feedforward_layernorm)
_HF_NORMS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_norm": "q_norm",
    "self_attn.k_norm": "k_norm",
}
_HF_NORMS_LLAMA = {**_HF_NORMS, "post_attention_layernorm": "ffn_norm"}
_HF_NORMS_GEMMA = {
    **_HF_NORMS,
    "post_attention_layernorm": "post_attn_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffn_norm",
}


def compact_from_float(state: dict[str, torch.Tensor], config: CompactConfig) -> CompactLM:
    """The decoder from a transformers Llama/Qwen/Gemma 3 state dict (`model.layers.N.self_attn.q_proj.weight`...)."""
    shift = 1.0 if config.gemma else 0.0  # Gemma's norms scale by (1 + w)
    names = _HF_NORMS_GEMMA if config.gemma else _HF_NORMS_LLAMA
    blocks = []
    for i in range(config.layers):
        p = f"model.layers.{i}."
        qkv = torch.cat([state[f"{p}self_attn.{x}_proj.weight"] for x in "qkv"])
        bias = None
        if f"{p}self_attn.q_proj.bias" in state:
            bias = torch.cat([state[f"{p}self_attn.{x}_proj.bias"] for x in "qkv"])
        w13 = torch.cat([state[f"{p}mlp.gate_proj.weight"], state[f"{p}mlp.up_proj.weight"]])
        linears = (
            _linear(qkv, bias),
            _linear(state[f"{p}self_attn.o_proj.weight"]),
            _linear(w13),
            _linear(state[f"{p}mlp.down_proj.weight"]),
        )
        norms = {
            ours: state[f"{p}{theirs}.weight"] + shift
            for theirs, ours in names.items()
            if f"{p}{theirs}.weight" in state
        }
        blocks.append(_block(config, i, linears, norms))
    embed = nn.Embedding.from_pretrained(state["model.embed_tokens.weight"], freeze=True)
    head = _linear(state.get("lm_head.weight", state["model.embed_tokens.weight"]))
    norm = RMSNorm(state["model.norm.weight"] + shift, config.rms_eps)
    return CompactLM(config, embed, blocks, norm, head).eval()
