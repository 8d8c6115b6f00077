"""A KV cache for several sequences at once, and one decode step of the compact decoder over all of them.

Lives here: `BatchKV`, `SlotKV`, `batch_decode_step`. Imports torch and `pipelines.llm.compact_model`.

The cache is gpt-fast's static one with a batch dimension that means *slots*: (slots, Hkv, S, D) per layer,
and each slot holds one sequence at its own length. A joining sequence is prefilled alone into its slot
through `slot_view` (the same `CompactLM.step` a single run makes, writing into views of that slot's rows),
so its first token is the one a single run gives. A decode step then feeds one token per active sequence,
each at its own position: rotary tables and the cache write are indexed per row, and each row attends only
to its own filled positions (a (B, 1, 1, L) mask over the longest one; on a sliding-window layer, only the
last `window` of them). The per-layer math (q/k norms, rotary, Gemma's sandwich norms) is the block's own.
"""

from __future__ import annotations

import torch

from pipelines.llm.compact_model import CompactConfig, CompactLM, rotary_tables


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
        self.rotary = rotary_tables(config, max_tokens, dtype)  # one per layer

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
    key_pos = torch.arange(length, device=device)[None, :]
    causal = key_pos <= pos[:, None]  # (B, L): each row's own filled positions
    masks: dict[int, torch.Tensor] = {}  # per window size (0: none), built once a step
    angles: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # per rotary table, likewise
    x = model.embed_ids(tokens)  # (B, 1, hidden)
    for layer, block in enumerate(model.blocks):
        attention = block.attention
        table = kv.rotary[layer]
        if id(table) not in angles:  # each row's own position
            angles[id(table)] = (
                table.cos[pos].view(b, 1, 1, c.head_dim),
                table.sin_signed[pos].view(b, 1, 1, c.head_dim),
            )
        cos, sin = angles[id(table)]
        q, k, v = attention.project(block.attn_norm(x), cos, sin)  # (B, H, 1, D), (B, Hkv, 1, D)
        kv.k[layer][slot_ids, :, pos] = k[:, :, 0]  # (B, Hkv, D) into each slot at its own position
        kv.v[layer][slot_ids, :, pos] = v[:, :, 0]
        keys, values = kv.k[layer][rows, :, :length], kv.v[layer][rows, :, :length]  # (B, Hkv, L, D)
        window = attention.window
        if window not in masks:
            seen = causal & (key_pos > pos[:, None] - window) if window else causal
            masks[window] = seen.view(b, 1, 1, length)
        y = attention.attend(q, keys, values, masks[window], causal=False)
        x = block.add_attention(x, y)
    return model.logits(x[:, -1, :])  # (B, V)
