"""A small Llama/Qwen/Gemma 3 decoder written out (gpt-fast's `model.py` shape) for packed weights and a static cache.

Lives here: `CompactConfig` (from a transformers config), `CompactLM`, `StaticKV`, `RotaryTable`,
`UnsupportedPackedError`.
Imports torch and `pipelines.llm.compact_decode` (the flat one-token step); reads a transformers config's attributes.

Why our own: transformers' LlamaForCausalLM spends most of a batch-1 decode step in Python (masks, cache
bookkeeping, output objects); here a step is 30 blocks of a few tensor ops each. The math is transformers':
RMSNorm in float32, rotate-half rotary embeddings on the un-permuted Q/K layout, grouped-query attention
through `scaled_dot_product_attention`, a gated MLP; q/k/v biases when the file has them (Qwen2). Per family
(read from transformers' modeling files): Qwen3 and Gemma 3 normalise each head's q and k before the rotary
embedding; Gemma 3 also scales the embedding by sqrt(hidden), normalises after attention and after the MLP
too (four norms a block), uses GELU (tanh) in the MLP, scores with query_pre_attn_scalar^-1/2, and runs its
local layers with a sliding window and their own rotary base; a final logit soft-cap when the config sets
one. Gemma's norms scale by (1 + w): the weights held here are already 1 + w (llama.cpp stores them so).
Linear layers are any module taking (..., K) -> (..., N): `PackedLinear` for packed weights, `nn.Linear` for
float ones (tests build it from float32 weights to check it against transformers token for token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipelines.llm.compact_decode import decode_one


class UnsupportedPackedError(ValueError):
    """The model needs something the compact decoder does not do (the float32 path may still run it)."""


_ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


def _rope_theta(parameters: Any, default: float) -> float:
    if isinstance(parameters, dict) and parameters.get("rope_theta") is not None:
        return float(parameters["rope_theta"])
    return default


@dataclass(frozen=True)
class CompactConfig:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rms_eps: float
    rope_theta: float
    qk_norm: bool = False  # Qwen3, Gemma 3: an RMSNorm over each head's q and k
    gemma: bool = False  # Gemma 3: scaled embedding, norms after attention and MLP, GELU (tanh)
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    sliding_window: int = 0  # positions a local layer sees (its own included); 0: none
    local_layers: tuple[bool, ...] = ()  # per layer: True = sliding window, own rotary base
    rope_local_theta: float = 0.0
    final_softcap: float | None = None

    @property
    def embed_scale(self) -> float:
        return self.hidden**0.5 if self.gemma else 1.0

    def is_local(self, layer: int) -> bool:
        return bool(self.local_layers) and self.local_layers[layer]

    @classmethod
    def from_transformers(cls, config: Any) -> CompactConfig:
        heads = int(config.num_attention_heads)
        model_type = str(getattr(config, "model_type", ""))
        gemma = model_type in ("gemma3_text", "gemma3")
        if model_type not in ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma3"):
            raise UnsupportedPackedError(f"model type {model_type!r} is not supported by the packed decoder")
        if getattr(config, "attn_logit_softcapping", None):
            raise UnsupportedPackedError(
                "attention logit soft-capping is not supported by the packed decoder"
            )
        rope = getattr(config, "rope_parameters", None) or {}
        if gemma:  # one rope entry per layer type
            full, local = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
        else:
            full, local = rope, {}
        for params in (full, local):
            rope_type = params.get("rope_type", params.get("type", "default"))
            if rope_type not in ("default", None):
                raise UnsupportedPackedError(
                    f"rope scaling {rope_type!r} is not supported by the packed decoder"
                )
        theta = getattr(config, "rope_theta", None) if not gemma else None
        theta = float(theta) if theta is not None else _rope_theta(full, 10000.0)
        layers = int(config.num_hidden_layers)
        window = int(getattr(config, "sliding_window", None) or 0)
        if model_type in ("qwen2", "qwen3") and not getattr(config, "use_sliding_window", False):
            window = 0
        local_layers: tuple[bool, ...] = ()
        if window:
            types = getattr(config, "layer_types", None) or ["sliding_attention"] * layers
            local_layers = tuple(t == "sliding_attention" for t in types)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        scalar = getattr(config, "query_pre_attn_scalar", None) if gemma else None
        activation = str(getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu"))
        if activation not in _ACTIVATIONS or (_ACTIVATIONS[activation] == "gelu_tanh") != gemma:
            raise UnsupportedPackedError(
                f"MLP activation {activation!r} is not supported by the packed decoder"
            )
        return cls(
            hidden=int(config.hidden_size),
            layers=layers,
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=head_dim,
            intermediate=int(config.intermediate_size),
            vocab=int(config.vocab_size),
            rms_eps=float(config.rms_norm_eps),
            rope_theta=theta,
            qk_norm=model_type == "qwen3" or gemma,
            gemma=gemma,
            attn_scale=float(scalar) ** -0.5 if scalar else None,
            sliding_window=window,
            local_layers=local_layers,
            rope_local_theta=_rope_theta(local, 10000.0) if gemma else theta,
            final_softcap=float(getattr(config, "final_logit_softcapping", None) or 0) or None,
        )


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # transformers' LlamaRMSNorm: normalise in float32, then scale
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:  # one op, same formula
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class RotaryTable:
    """cos/sin for every position up to `positions`, (P, head_dim), as transformers' default rope."""

    def __init__(self, head_dim: int, theta: float, positions: int, dtype: torch.dtype) -> None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq)  # (P, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
        self.cos = emb.cos().to(dtype)
        self.sin = emb.sin().to(dtype)
        # rotate_half(x) * sin == roll(x, D/2) * sin_signed: two ops (roll, mul) instead of four
        half = head_dim // 2
        self.sin_signed = torch.cat([-self.sin[:, :half], self.sin[:, half:]], dim=-1)


def rotary_tables(config: CompactConfig, positions: int, dtype: torch.dtype) -> list[RotaryTable]:
    """Per layer: the global table, or the local one on a Gemma sliding layer (shared objects)."""
    full = RotaryTable(config.head_dim, config.rope_theta, positions, dtype)
    if not config.local_layers or config.rope_local_theta == config.rope_theta:
        return [full] * config.layers
    local = RotaryTable(config.head_dim, config.rope_local_theta, positions, dtype)
    return [local if config.is_local(i) else full for i in range(config.layers)]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x: (B, H, S, D); cos/sin_signed: (S, D) (`RotaryTable.sin_signed`, broadcastable).

    transformers' x * cos + rotate_half(x) * sin, with rotate_half(x) = [-x2, x1] written as
    roll(x, D/2) = [x2, x1] times sin with its first half negated: the same products bit for bit (a
    fused multiply-add would round once instead of twice, and flip greedy near-ties of the packed path)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


class StaticKV:
    """Keys and values for every layer, allocated once for `max_tokens` positions: (B, Hkv, S, D) each."""

    def __init__(
        self, config: CompactConfig, max_tokens: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        shape = (1, config.kv_heads, max_tokens, config.head_dim)
        self.max_tokens = max_tokens
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.rotary = rotary_tables(config, max_tokens, dtype)  # one per layer
        self.filled = 0  # positions written so far (the loop writes them in order)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


class Attention(nn.Module):
    def __init__(
        self,
        config: CompactConfig,
        wqkv: nn.Module,
        wo: nn.Module,
        q_norm: RMSNorm | None = None,
        k_norm: RMSNorm | None = None,
        window: int = 0,
    ) -> None:
        super().__init__()
        self.config = config
        self.wqkv = wqkv  # q, k and v projections as one matmul: (..., hidden) -> (..., (H + 2 Hkv) D)
        self.wo = wo
        self.q_norm, self.k_norm = q_norm, k_norm  # over head_dim, before the rotary embedding
        self.window = window  # a local layer's sliding window (0: sees everything before it)

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, S, hidden) -> q (B, H, S, D), k and v (B, Hkv, S, D), normed and rotated.

        `sin_signed`: the rotary table's `sin_signed` rows (see `apply_rotary`)."""
        c = self.config
        b, s, _ = x.shape
        qk, v = self.wqkv(x).split([(c.heads + c.kv_heads) * c.head_dim, c.kv_heads * c.head_dim], -1)
        v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        qk = qk.view(b, s, c.heads + c.kv_heads, c.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = qk.split([c.heads, c.kv_heads], 2)
            q, k = self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2)  # (B, H, S, D)
            return apply_rotary(q, cos, sin_signed), apply_rotary(k, cos, sin_signed), v
        # no per-head norms: q and k rotate as one tensor (fewer small ops a step)
        q, k = apply_rotary(qk.transpose(1, 2), cos, sin_signed).split([c.heads, c.kv_heads], 1)
        return q, k, v

    def attend(
        self,
        q: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        """q (B, H, S, D) over keys/values (B, Hkv, L, D) -> the output projection (B, S, hidden)."""
        c = self.config
        b, _, s, _ = q.shape
        y = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=causal, enable_gqa=True, scale=c.attn_scale
        )
        return self.wo(y.transpose(1, 2).reshape(b, s, c.heads * c.head_dim))

    def forward(self, x: torch.Tensor, kv: StaticKV, layer: int, start: int) -> torch.Tensor:
        s = x.shape[1]
        end = start + s
        table = kv.rotary[layer]
        q, k, v = self.project(x, table.cos[start:end], table.sin_signed[start:end])
        kv.k[layer][:, :, start:end] = k
        kv.v[layer][:, :, start:end] = v
        first = max(0, start - self.window + 1) if self.window else 0  # older positions are out of sight
        keys, values = kv.k[layer][:, :, first:end], kv.v[layer][:, :, first:end]
        if s == 1:  # one new token sees everything still in its window
            return self.attend(q, keys, values, None, causal=False)
        if start == 0 and not self.window:  # a first chunk is plainly causal
            return self.attend(q, keys, values, None, causal=True)
        # each query (position start+i) sees the keys at positions first..start+i, within its window
        query_pos = torch.arange(start, end, device=x.device)[:, None]
        key_pos = torch.arange(first, end, device=x.device)[None, :]
        mask = key_pos <= query_pos
        if self.window:
            mask &= key_pos > query_pos - self.window
        return self.attend(q, keys, values, mask, causal=False)


class MLP(nn.Module):
    def __init__(self, config: CompactConfig, w13: nn.Module, w2: nn.Module) -> None:
        super().__init__()
        self.intermediate = config.intermediate
        self.gelu = config.gemma  # Gemma: GELU with the tanh approximation; else SiLU
        self.w13 = w13  # gate and up as one matmul: (..., hidden) -> (..., 2 * intermediate)
        self.w2 = w2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.intermediate, dim=-1)
        act = F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)
        return self.w2(act * up)


class Block(nn.Module):
    def __init__(
        self,
        attention: Attention,
        mlp: MLP,
        attn_norm: RMSNorm,
        ffn_norm: RMSNorm,
        post_attn_norm: RMSNorm | None = None,
        post_ffn_norm: RMSNorm | None = None,
    ) -> None:
        super().__init__()
        self.attention, self.mlp = attention, mlp
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm
        self.post_attn_norm, self.post_ffn_norm = post_attn_norm, post_ffn_norm  # Gemma's sandwich norms

    def add_attention(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The residual after attention output `y`, then the MLP's: the block's output."""
        h = x + (self.post_attn_norm(y) if self.post_attn_norm is not None else y)
        out = self.mlp(self.ffn_norm(h))
        return h + (self.post_ffn_norm(out) if self.post_ffn_norm is not None else out)

    def forward(self, x: torch.Tensor, kv: StaticKV, layer: int, start: int) -> torch.Tensor:
        return self.add_attention(x, self.attention(self.attn_norm(x), kv, layer, start))


class CompactLM(nn.Module):
    """ids (B, S) at positions start..start+S-1 -> logits of the last position (B, V)."""

    compact = True  # the generation loop calls `step` instead of transformers' forward

    def __init__(
        self,
        config: CompactConfig,
        embed: nn.Module,
        blocks: list[Block],
        norm: RMSNorm,
        lm_head: nn.Module,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = config
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm
        self.lm_head = lm_head
        self.dtype = dtype
        self.device = norm.weight.device

    def new_kv(self, max_tokens: int) -> StaticKV:
        return StaticKV(self.config, max_tokens, self.dtype, self.device)

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids).to(self.dtype)  # (B, S, hidden)
        if self.config.gemma:  # Gemma3TextScaledWordEmbedding: sqrt(hidden), as a float32 scalar
            x = x * torch.tensor(self.config.embed_scale, dtype=self.dtype)
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, hidden), the last position -> (B, V)."""
        logits = self.lm_head(self.norm(x))
        cap = self.config.final_softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    def step(self, ids: torch.Tensor, kv: StaticKV) -> torch.Tensor:
        if ids.shape == (1, 1):  # one decode step: the same ops with less Python (compact_decode)
            return decode_one(self, ids, kv)
        return self.forward_modules(ids, kv)

    def forward_modules(self, ids: torch.Tensor, kv: StaticKV) -> torch.Tensor:
        """`step` through the modules: any number of sequences and positions."""
        start = kv.filled
        assert start + ids.shape[1] <= kv.max_tokens, "the KV cache is full"
        x = self.embed_ids(ids)
        for layer, block in enumerate(self.blocks):
            x = block(x, kv, layer, start)
        kv.filled = start + ids.shape[1]
        return self.logits(x[:, -1, :])  # (B, V)
