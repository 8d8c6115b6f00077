"""Memory: the bottom layer. Places models on the device you have, accounts for every byte, reports it live.

May import: stdlib, torch, safetensors, psutil, pynvml, platformdirs, filelock. Never nodes, pipelines, app
or Qt. Nothing happens at import: the app builds one MemoryManager and passes it down.

The names below are resolved on first access (PEP 562), not for cycles (memory/ has none: see
tests/test_import_graph.py) but for weight: `import memory.policy` or `memory.paths` from a command that
lists node types must not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> the module that defines it
_EXPORTS = {
    "BudgetExceeded": "memory.errors",
    "fmt_bytes": "memory.errors",
    "Policy": "memory.policy",
    "POLICIES": "memory.policy",
    "POLICY_NAMES": "memory.policy",
    "policy_named": "memory.policy",
    "MemoryConfig": "memory.config",
    "parse_bytes": "memory.config",
    "user_data_dir": "memory.paths",
    "ComponentSpec": "memory.ledger",
    "ModelHandle": "memory.ledger",
    "MemoryManager": "memory.manager",
    "Working": "memory.manager",
    "kv_cache_bytes": "memory.estimates",
    "Activations": "memory.estimates",
    "activation_bytes": "memory.estimates",
    "LoadEvent": "memory.telemetry",
    "LoadProgress": "memory.telemetry",
    "NodePeak": "memory.telemetry",
    "Sample": "memory.telemetry",
    "StepEvent": "memory.telemetry",
    "Telemetry": "memory.telemetry",
    "TransferEvent": "memory.telemetry",
    "UnloadEvent": "memory.telemetry",
    "WorkingReserved": "memory.telemetry",
}

__all__ = [
    "Activations",
    "BudgetExceeded",
    "ComponentSpec",
    "LoadEvent",
    "LoadProgress",
    "MemoryConfig",
    "MemoryManager",
    "ModelHandle",
    "NodePeak",
    "POLICIES",
    "POLICY_NAMES",
    "Policy",
    "Sample",
    "StepEvent",
    "Telemetry",
    "TransferEvent",
    "UnloadEvent",
    "Working",
    "WorkingReserved",
    "activation_bytes",
    "fmt_bytes",
    "kv_cache_bytes",
    "parse_bytes",
    "policy_named",
    "user_data_dir",
]

if TYPE_CHECKING:
    from memory.config import MemoryConfig, parse_bytes
    from memory.errors import BudgetExceeded, fmt_bytes
    from memory.estimates import Activations, activation_bytes, kv_cache_bytes
    from memory.ledger import ComponentSpec, ModelHandle
    from memory.manager import MemoryManager, Working
    from memory.paths import user_data_dir
    from memory.policy import POLICIES, POLICY_NAMES, Policy, policy_named
    from memory.telemetry import (
        LoadEvent,
        LoadProgress,
        NodePeak,
        Sample,
        StepEvent,
        Telemetry,
        TransferEvent,
        UnloadEvent,
        WorkingReserved,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
