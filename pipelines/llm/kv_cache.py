"""The KV cache behind a small interface: allocate for N tokens, hand to the model, report bytes.

Lives here: `KVCache`, `kv_geometry`. Imports torch, transformers' cache classes, `memory.estimates` and `pipelines.llm.compact_model`.
transformers' `cache_utils` has 20+ cache classes; the loop only needs "the object to pass as
`past_key_values`", "how many positions are filled" and "how many bytes is this" (for the ledger).
`dynamic` grows with each token (what `model.generate` uses by default, so greedy output matches it);
`static` allocates every position up front.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PretrainedConfig, StaticCache
from transformers.cache_utils import Cache

from memory.estimates import element_size, kv_cache_bytes
from pipelines.llm.compact_model import StaticKV


@dataclass(frozen=True)
class KVGeometry:
    layers: int
    kv_heads: int
    head_dim: int

    def bytes_for(self, tokens: int, dtype: torch.dtype = torch.float32, batch: int = 1) -> int:
        return kv_cache_bytes(self.layers, batch, tokens, self.kv_heads, self.head_dim, dtype)


def kv_geometry(config: PretrainedConfig) -> KVGeometry:
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return KVGeometry(
        config.num_hidden_layers, getattr(config, "num_key_value_heads", None) or heads, head_dim
    )


class KVCache:
    """One sequence's cache, sized for at most `max_tokens` positions."""

    def __init__(
        self,
        config: PretrainedConfig,
        max_tokens: int,
        *,
        kind: str = "dynamic",
        dtype: torch.dtype = torch.float32,
        model: torch.nn.Module | None = None,
    ) -> None:
        """`model`: a compact decoder (`pipelines.llm.compact_model`) brings its own static cache, used
        whatever `kind` asks (it is budgeted at its full size either way)."""
        if kind not in ("dynamic", "static"):
            raise ValueError(f"KV cache kind must be 'dynamic' or 'static', not {kind!r}")
        self.max_tokens = max_tokens
        self.dtype = dtype
        self.geometry = kv_geometry(config)
        self.cache: Cache | StaticKV
        if model is not None and getattr(model, "compact", False):
            self.kind = "static"
            self.cache = model.new_kv(max_tokens)
            return
        self.kind = kind
        self.cache = (
            DynamicCache(config=config)
            if kind == "dynamic"
            else StaticCache(config=config, max_cache_len=max_tokens)
        )

    @property
    def reserved_bytes(self) -> int:
        """What the full cache takes at `max_tokens` (the figure budgeted before the run)."""
        return self.geometry.bytes_for(self.max_tokens, self.dtype)

    @property
    def seq_len(self) -> int:
        if isinstance(self.cache, StaticKV):
            return self.cache.filled
        return int(self.cache.get_seq_length())

    def _tensors(self) -> Iterator[torch.Tensor]:
        if isinstance(self.cache, StaticKV):
            yield from (*self.cache.k, *self.cache.v)
            return
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if isinstance(t, torch.Tensor):
                    yield t

    @property
    def nbytes(self) -> int:
        """Bytes the cache tensors hold right now."""
        return sum(t.numel() * element_size(t.dtype) for t in self._tensors())
