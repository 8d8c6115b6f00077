"""Working-memory arithmetic: element sizes, sets of activations alive at once, the KV cache of a decoder.

Lives here: `element_size`, `Activations`, `activation_bytes`, `kv_cache_bytes`. May import: stdlib, torch.
No model knowledge: pipelines declare which activations a component keeps alive (e.g.
pipelines/diffusion/working.py) and this module multiplies and adds. Every figure is a fallback: once a
node has run, the measured peak (memory.learned) replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


def element_size(dtype: torch.dtype) -> int:
    return dtype.itemsize


@dataclass(frozen=True)
class Activations:
    """`count` tensors of `channels` x `positions` elements per batch item, alive at the same time."""

    what: str
    count: int
    channels: int
    positions: int

    @property
    def elements(self) -> int:
        return self.count * self.channels * self.positions


def activation_bytes(terms: Iterable[Activations], *, batch: int, dtype: torch.dtype) -> int:
    """Bytes of all `terms` at once: batch x element size x the sum of their elements."""
    return batch * element_size(dtype) * sum(t.elements for t in terms)


def kv_cache_bytes(
    layers: int,
    batch: int,
    seq_len: int,
    kv_heads: int,
    head_dim: int,
    dtype: torch.dtype | int = torch.float32,
) -> int:
    """Bytes of a full KV cache: 2 (key and value) x layers x batch x seq_len x kv_heads x head_dim x bytes.

    `seq_len` is the number of cached positions. After `generate(...)` that is prompt + new tokens - 1: the
    last sampled token is returned but never fed back, so it has no key/value yet.
    """
    nbytes = dtype if isinstance(dtype, int) else element_size(dtype)
    return 2 * layers * batch * seq_len * kv_heads * head_dim * nbytes
