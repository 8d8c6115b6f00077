"""The compact decoder's one-token step written flat: the same math as `CompactLM`'s modules, fewer Python calls.

Lives here: `decode_one`, `linear_2d`. Imports torch only (the decoder's classes are read by attribute, so
this module needs nothing from `compact_model` at import time and `compact_model` can call it).

Why: at batch 1 on a CPU a decode step of SmolLM2 is ~20 ms of kernels and (estimated from wall time
against the profiler's kernel time) ~10-15 ms more of Python and small ops: 9 module calls a block (each
`nn.Module.__call__` checks its hooks), a `PackedWeight` built per matmul, 3-D reshapes around each matmul,
separate (B, S, H, D) transposes. Here each block is one Python loop body over 2-D rows (B = S = 1), calling
the kernels directly (`linear_2d`). Every tensor op is the one the module path makes, on the same values in
the same order, so the logits equal `CompactLM.forward_modules`'s bit for bit (checked for every family,
float32 and packed, in tests/test_llm_families_gguf.py); only the Python around them differs. The prompt's
prefill and batched steps keep the module path (their time is kernel time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from pipelines.llm.compact_model import CompactLM, StaticKV


def linear_2d(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x (M, K) -> (M, N) through `module`: a packed layer's own kernel call, or an `nn.Linear`."""
    matmul = getattr(module, "matmul_2d", None)  # `PackedLinear`
    if matmul is not None:
        return matmul(x)
    assert isinstance(module, nn.Linear), f"a compact decoder's layer, not {type(module).__name__}"
    return F.linear(x, module.weight, module.bias)


def decode_one(model: CompactLM, ids: torch.Tensor, kv: StaticKV) -> torch.Tensor:
    """ids (1, 1), the token at position `kv.filled` -> logits (1, V) of the next one; fills that slot."""
    c = model.config
    start = kv.filled
    end = start + 1
    assert end <= kv.max_tokens, "the KV cache is full"
    qk_width, v_width = (c.heads + c.kv_heads) * c.head_dim, c.kv_heads * c.head_dim
    x = model.embed_ids(ids).view(1, c.hidden)
    for layer, block in enumerate(model.blocks):
        att = block.attention
        table = kv.rotary[layer]
        qk, v = linear_2d(att.wqkv, block.attn_norm.forward(x)).split([qk_width, v_width], -1)
        qk = qk.view(1, c.heads + c.kv_heads, 1, c.head_dim)  # (B, H, S, D) at S = 1 is a plain view
        cos, sin = table.cos[start:end], table.sin_signed[start:end]
        if att.q_norm is not None and att.k_norm is not None:
            q, k = qk.split([c.heads, c.kv_heads], 1)
            q = att.q_norm.forward(q)
            k = att.k_norm.forward(k)
            q, k = q * cos + q.roll(c.head_dim // 2, -1) * sin, k * cos + k.roll(c.head_dim // 2, -1) * sin
        else:
            q, k = (qk * cos + qk.roll(c.head_dim // 2, -1) * sin).split([c.heads, c.kv_heads], 1)
        kv.k[layer][:, :, start:end] = k
        kv.v[layer][:, :, start:end] = v.view(1, c.kv_heads, 1, c.head_dim)
        first = max(0, start - att.window + 1) if att.window else 0
        y = F.scaled_dot_product_attention(
            q, kv.k[layer][:, :, first:end], kv.v[layer][:, :, first:end], enable_gqa=True, scale=c.attn_scale
        )
        y = linear_2d(att.wo, y.view(1, c.heads * c.head_dim))
        h = x + (block.post_attn_norm.forward(y) if block.post_attn_norm is not None else y)
        gate, up = linear_2d(block.mlp.w13, block.ffn_norm.forward(h)).split(c.intermediate, -1)
        act = F.gelu(gate, approximate="tanh") if block.mlp.gelu else F.silu(gate)
        out = linear_2d(block.mlp.w2, act * up)
        x = h + (block.post_ffn_norm.forward(out) if block.post_ffn_norm is not None else out)
    kv.filled = end
    return model.logits(x)
