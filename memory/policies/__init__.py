"""Placement policies, in the diffusers-hooks shape: a config dataclass and one public apply function each.

May import: stdlib, torch, safetensors, memory.weights, memory.release, memory.estimates.

- `resident`: whole-module moves (`apply_resident`, `offload_module`). The `none`, `auto` and `sequential`
  policies are manager decisions built from these moves plus an eviction plan.
- `lru`: `plan_eviction`, which unlocked models to evict (least recently used first) and how much of each.
- `stream`: `apply_streaming`, partial residency with block-by-block streaming through forward hooks.
- `hooks`: named forward hooks on a module; a name can be registered once.
"""

from memory.policies.lru import Eviction, EvictionConfig, plan_eviction
from memory.policies.resident import ResidentConfig, apply_resident, offload_module
from memory.policies.stream import STREAM_HOOK, StreamConfig, StreamState, apply_streaming, remove_streaming

__all__ = [
    "STREAM_HOOK",
    "Eviction",
    "EvictionConfig",
    "ResidentConfig",
    "StreamConfig",
    "StreamState",
    "apply_resident",
    "apply_streaming",
    "offload_module",
    "plan_eviction",
    "remove_streaming",
]
