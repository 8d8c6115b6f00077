"""A KV cache for several sequences at once, and one decode step of the compact decoder over all of them.

Lives here: `BatchKV`, `SlotKV`, `batch_decode_step`. Imports torch and `pipelines.llm.compact_model`.

The cache is gpt-fast's static one with a batch dimension that means *slots*: (slots, Hkv, S, D) per layer,
and each slot holds one sequence at its own length. A joining sequence is prefilled alone into its slot
through `slot_view` (the same `CompactLM.step` a single run makes, writing into views of that slot's rows),
so its first token is the one a single run gives. A decode step then feeds one token per active sequence,
each at its own position: rotary tables and the cache write are indexed per row, and each row attends only
to its own filled positions (a (B, 1, 1, L) mask over the longest one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipelines.llm.compact_model import CompactConfig, CompactLM, RotaryTable, apply_rotary


class SlotKV:
    """One slot of a `BatchKV` seen as a one-sequence static cache (what `CompactLM.step` takes): the
    tensors are views of the slot's rows, so what the step writes lands in the batch cache."""

    def __init__(self, kv: BatchKV, slot: int) -> None:
        self.k = [t[slot : slot + 1] for t in kv.k]
        self.v = [t[slot : slot + 1] for t in kv.v]
        self.rotary = kv.rotary
        self.max_tokens = kv.max_tokens
        self.filled = 0


class BatchKV:
    """Keys and values of `slots` sequences of at most `max_tokens` positions each: (slots, Hkv, S, D)."""

    def __init__(
        self, config: CompactConfig, slots: int, max_tokens: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        shape = (slots, config.kv_heads, max_tokens, config.head_dim)
        self.slots = slots
        self.max_tokens = max_tokens
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]
        self.rotary = RotaryTable(config.head_dim, config.rope_theta, max_tokens, dtype)

    def slot_view(self, slot: int) -> SlotKV:
        return SlotKV(self, slot)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


def _rows(slots: list[int]) -> slice | torch.Tensor:
    """Slots 0..n-1 in order are a slice (views, no copy); any other set is gathered."""
    if slots == list(range(len(slots))):
        return slice(0, len(slots))
    return torch.tensor(slots, dtype=torch.long)


@torch.inference_mode()
def batch_decode_step(
    model: CompactLM, tokens: torch.Tensor, kv: BatchKV, slots: list[int], positions: list[int]
) -> torch.Tensor:
    """tokens (B, 1), the next token of the sequence in `slots[b]` at cache position `positions[b]`
    -> logits (B, V) of each sequence's next token."""
    c = model.config
    b = tokens.shape[0]
    assert b == len(slots) == len(positions), "one token, slot and position per sequence"
    assert max(positions) < kv.max_tokens, "the KV cache is full"
    device = tokens.device
    pos = torch.tensor(positions, dtype=torch.long, device=device)  # (B,)
    slot_ids = torch.tensor(slots, dtype=torch.long, device=device)
    rows = _rows(slots)
    length = max(positions) + 1
    cos = kv.rotary.cos[pos].view(b, 1, 1, c.head_dim)  # each row's own position
    sin = kv.rotary.sin[pos].view(b, 1, 1, c.head_dim)
    mask = (torch.arange(length, device=device)[None, :] <= pos[:, None]).view(b, 1, 1, length)
    x = model.embed(tokens).to(model.dtype)  # (B, 1, hidden)
    for layer, block in enumerate(model.blocks):
        attention = block.attention
        h = block.attn_norm(x)
        q, k, v = attention.wqkv(h).split(
            [c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], -1
        )
        q = q.view(b, 1, c.heads, c.head_dim).transpose(1, 2)  # (B, H, 1, D)
        k = k.view(b, 1, c.kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, 1, D)
        v = v.view(b, 1, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        kv.k[layer][slot_ids, :, pos] = k[:, :, 0]  # (B, Hkv, D) into each slot at its own position
        kv.v[layer][slot_ids, :, pos] = v[:, :, 0]
        keys, values = kv.k[layer][rows, :, :length], kv.v[layer][rows, :, :length]  # (B, Hkv, L, D)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        h = x + attention.wo(y.transpose(1, 2).reshape(b, 1, c.heads * c.head_dim))
        x = h + block.mlp(block.ffn_norm(h))
    return model.lm_head(model.norm(x[:, -1, :]))  # (B, V)
