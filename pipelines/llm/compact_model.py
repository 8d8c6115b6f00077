"""A small Llama/Qwen2 decoder written out (gpt-fast's `model.py` shape) for packed weights and a static cache.

Lives here: `CompactConfig` (from a transformers config), `CompactLM`, `StaticKV`, `RotaryTable`,
`UnsupportedPackedError`.
Imports torch only (and reads a transformers config's attributes).

Why our own: transformers' LlamaForCausalLM spends most of a batch-1 decode step in Python (masks, cache
bookkeeping, output objects); here a step is 30 blocks of a few tensor ops each. The math is transformers'
Llama: RMSNorm in float32, rotate-half rotary embeddings on the un-permuted Q/K layout, grouped-query
attention through `scaled_dot_product_attention`, SiLU-gated MLP; q/k/v biases when the file has them (Qwen2).
Linear layers are any module taking (..., K) -> (..., N): `PackedLinear` for packed weights, `nn.Linear` for
float ones (tests build it from float32 weights to check it against transformers token for token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class UnsupportedPackedError(ValueError):
    """The model needs something the compact decoder does not do (the float32 path may still run it)."""


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

    @classmethod
    def from_transformers(cls, config: Any) -> CompactConfig:
        heads = int(config.num_attention_heads)
        scaling = getattr(config, "rope_scaling", None) or {}
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ("default", None):
            raise UnsupportedPackedError(f"rope scaling {rope_type!r} is not supported by the packed decoder")
        theta = getattr(config, "rope_theta", None)
        if theta is None:  # transformers 5 keeps it in rope_parameters
            theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        return cls(
            hidden=int(config.hidden_size),
            layers=int(config.num_hidden_layers),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            intermediate=int(config.intermediate_size),
            vocab=int(config.vocab_size),
            rms_eps=float(config.rms_norm_eps),
            rope_theta=float(theta),
        )


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # transformers' LlamaRMSNorm: normalise in float32, then scale
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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, S, D); cos/sin: (S, D)."""
    return x * cos + _rotate_half(x) * sin


class StaticKV:
    """Keys and values for every layer, allocated once for `max_tokens` positions: (B, Hkv, S, D) each."""

    def __init__(
        self, config: CompactConfig, max_tokens: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        shape = (1, config.kv_heads, max_tokens, config.head_dim)
        self.max_tokens = max_tokens
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.rotary = RotaryTable(config.head_dim, config.rope_theta, max_tokens, dtype)
        self.filled = 0  # positions written so far (the loop writes them in order)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


class Attention(nn.Module):
    def __init__(self, config: CompactConfig, wqkv: nn.Module, wo: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.wqkv = wqkv  # q, k and v projections as one matmul: (..., hidden) -> (..., (H + 2 Hkv) D)
        self.wo = wo

    def forward(self, x: torch.Tensor, kv: StaticKV, layer: int, start: int) -> torch.Tensor:
        c = self.config
        b, s, _ = x.shape
        q, k, v = self.wqkv(x).split(
            [c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], -1
        )
        q = q.view(b, s, c.heads, c.head_dim).transpose(1, 2)  # (B, H, S, D)
        k = k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, S, D)
        v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        end = start + s
        cos, sin = kv.rotary.cos[start:end], kv.rotary.sin[start:end]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        kv.k[layer][:, :, start:end] = k
        kv.v[layer][:, :, start:end] = v
        keys, values = kv.k[layer][:, :, :end], kv.v[layer][:, :, :end]
        if s == 1 or start == 0:  # one new token sees everything; a first chunk is plainly causal
            y = F.scaled_dot_product_attention(q, keys, values, is_causal=s > 1, enable_gqa=True)
        else:  # a later chunk of several tokens: each sees the cache and the chunk up to itself
            mask = torch.ones(s, end, dtype=torch.bool, device=x.device).tril(diagonal=start)
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, c.heads * c.head_dim))


class MLP(nn.Module):
    def __init__(self, config: CompactConfig, w13: nn.Module, w2: nn.Module) -> None:
        super().__init__()
        self.intermediate = config.intermediate
        self.w13 = w13  # gate and up as one matmul: (..., hidden) -> (..., 2 * intermediate)
        self.w2 = w2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.intermediate, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, attention: Attention, mlp: MLP, attn_norm: RMSNorm, ffn_norm: RMSNorm) -> None:
        super().__init__()
        self.attention, self.mlp = attention, mlp
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm

    def forward(self, x: torch.Tensor, kv: StaticKV, layer: int, start: int) -> torch.Tensor:
        h = x + self.attention(self.attn_norm(x), kv, layer, start)
        return h + self.mlp(self.ffn_norm(h))


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

    def step(self, ids: torch.Tensor, kv: StaticKV) -> torch.Tensor:
        start = kv.filled
        assert start + ids.shape[1] <= kv.max_tokens, "the KV cache is full"
        x = self.embed(ids).to(self.dtype)  # (B, S, hidden)
        for layer, block in enumerate(self.blocks):
            x = block(x, kv, layer, start)
        kv.filled = start + ids.shape[1]
        return self.lm_head(self.norm(x[:, -1, :]))  # (B, V)
