"""Eviction planning: which models leave the device, and how much of each, when a load needs room.

May import: stdlib.
Order: least recently used first, unlocked models only (a locked model is in use by a running node). A model
that can stream gives up only the blocks needed when that frees enough (partial eviction); otherwise it
leaves entirely. Models never used still resident go first (last_used 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Evictable(Protocol):
    key: str
    device_bytes: int
    last_used: int

    @property
    def is_locked(self) -> bool: ...


@dataclass(frozen=True)
class EvictionConfig:
    allow_partial: bool = True


@dataclass(frozen=True)
class Eviction:
    key: str
    nbytes: int  # bytes this eviction frees on the device
    partial: bool  # True: keep the rest resident (stream the evicted blocks)


def plan_eviction(
    handles: list[Evictable],
    need: int,
    partial_freeable: dict[str, list[int]] | None = None,
    config: EvictionConfig | None = None,
) -> list[Eviction] | None:
    """Evictions that free at least `need` bytes, or None when even evicting every unlocked model can't.

    `partial_freeable[key]` lists, for a model that can stream, the bytes freed by giving up 1, 2, ... blocks
    (cumulative, ascending); the smallest entry >= what is still needed is taken.
    """
    config = config or EvictionConfig()
    partial_freeable = partial_freeable or {}
    if need <= 0:
        return []
    plan: list[Eviction] = []
    remaining = need
    for h in sorted(
        (h for h in handles if not h.is_locked and h.device_bytes > 0), key=lambda h: h.last_used
    ):
        steps = partial_freeable.get(h.key, []) if config.allow_partial else []
        enough = [s for s in steps if s >= remaining and s < h.device_bytes]
        if enough:
            plan.append(Eviction(h.key, enough[0], partial=True))
            return plan
        plan.append(Eviction(h.key, h.device_bytes, partial=False))
        remaining -= h.device_bytes
        if remaining <= 0:
            return plan
    return None
