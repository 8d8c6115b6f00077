"""Memory configuration: the `MemoryConfig` dataclass and byte-size parsing.

May import: stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

POLICIES = ("none", "auto", "sequential", "stream")
"""From loosest to strictest; `MemoryManager.recover_from_oom` walks this order."""

# Decimal units mean powers of 1000 and binary units powers of 1024, as the SI/IEC names say;
# a bare letter (G, M, K) follows `free -h`, `docker --memory` and PyTorch's own reporting: binary.
_UNITS = MappingProxyType(
    {
        "": 1,
        "b": 1,
        "k": 1024,
        "kb": 1000,
        "kib": 1024,
        "m": 1024**2,
        "mb": 1000**2,
        "mib": 1024**2,
        "g": 1024**3,
        "gb": 1000**3,
        "gib": 1024**3,
        "t": 1024**4,
        "tb": 1000**4,
        "tib": 1024**4,
    }
)
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: str | int | float) -> int:
    """Parse "6GiB", "512MB", "1.5G", "1024" or a plain int into a byte count."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative size: {value!r}")
        return int(value)
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {value!r} (try '6GiB', '512MB', '1.5G' or a number of bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_budget(value: str | int | float | None, available: int) -> int:
    """A budget in bytes: a size ("6GiB"), a fraction of `available` ("0.5"), or all of it (None).

    A unitless number <= 1 is a fraction; anything else is a size.
    """
    if value is None:
        return available
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match and not match.group(2) and float(match.group(1)) <= 1.0:
            return int(float(match.group(1)) * available)
    elif isinstance(value, float) and value <= 1.0:
        return int(value * available)
    return parse_bytes(value)


@dataclass
class MemoryConfig:
    """How the memory manager places models.

    device: auto | cpu | cuda:N | mps. `auto` picks CUDA, then MPS, then CPU.
    policy: none | sequential | auto | stream (see `memory.manager` for what each does).
    vram_budget: device budget: a size, a fraction of the device memory free at start, or None for all free.
    ram_budget: the same on host RAM (of `available` at start). It is THE budget when the device is the CPU;
        on an accelerator it bounds the host copies (pageable and pinned) kept to make reloads cheap.
    reserve: bytes held back from the budget for memory nobody declared. Default 0: every model's weights
        are counted exactly from their headers and each node's working memory is reserved per use from an
        estimate (a formula, replaced by the measured peak once one exists), so a blanket reserve would count
        the same bytes twice. Set it to leave room for other programs or for allocator fragmentation.
    data_dir: where the learned peaks JSON lives; default `memory.paths.user_data_dir()`.
    sample_hz: telemetry sampling rate.
    """

    device: str = "auto"
    policy: str = "auto"
    vram_budget: str | None = None
    ram_budget: str | None = None
    reserve: str | None = None
    data_dir: Path | None = None
    sample_hz: float = 10.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown memory policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.sample_hz <= 0:
            raise ValueError("sample_hz must be positive")
