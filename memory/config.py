"""Memory configuration: the `MemoryConfig` dataclass, budget rules and byte-size parsing.

Lives here: `MemoryConfig`, `parse_bytes`, `parse_budget`, `Budgets`. May import: stdlib, memory.policy.
`MemoryConfig` is the one owner of the budget settings: the CLI (`app.cli.memory_config`), the GUI
(`app.gui.settings.AppSettings.memory`) and the sweep workers (`app.batch.worker.WorkerConfig.memory`) all
build and pass this type; none declares its own copy of device/policy/budgets.
Every setting is parsed when the config is built, whatever the device, so a bad value fails at once with the
setting's name; `ignored_settings(device_type)` says which settings have no effect on a device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from memory.policy import POLICY_NAMES, policy_named

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


def _fraction(value: str | int | float | None) -> float | None:
    """The share of what is available that `value` asks for (None: all of it), or None for a size."""
    if value is None:
        return 1.0
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match and not match.group(2) and float(match.group(1)) <= 1.0:
            return float(match.group(1))
    elif isinstance(value, float) and value <= 1.0:
        return value
    return None


def parse_budget(value: str | int | float | None, available: int) -> int:
    """A budget in bytes: a size ("6GiB"), a fraction of `available` ("0.5"), or all of it (None).

    A unitless number <= 1 is a fraction; anything else is a size.
    """
    share = _fraction(value)
    if share is not None:
        return int(share * available)
    return parse_bytes(value)  # type: ignore[arg-type]  # None is a fraction (all of it)


@dataclass(frozen=True)
class Budgets:
    """The budgets in bytes: one for the execution device, and one for host copies on an accelerator
    (None on the CPU, where host RAM *is* the device)."""

    device: int
    host: int | None


@dataclass(frozen=True)
class MemoryConfig:
    """How the memory manager places models.

    device: auto | cpu | cuda:N | mps. `auto` picks CUDA, then MPS, then CPU.
    policy: one of `memory.policy.POLICY_NAMES` (see `memory.policy` for what each does).
    vram_budget: the accelerator's budget: a size, a fraction of the device memory free at start, or None for
        all free. Has no effect on the CPU (`ignored_settings` says so; the CLI and GUI warn).
    ram_budget: host RAM (of `available` at start). On the CPU it is the device budget; on an accelerator it
        bounds the host copies (pageable and pinned) kept to make reloads cheap.
    reserve: bytes held back from the budget for memory nobody declared. Default 0: every model's weights
        are counted exactly from their headers and each node's working memory is reserved per use from an
        estimate (a formula, replaced by the measured peak once one exists), so a blanket reserve would count
        the same bytes twice. Set it to leave room for other programs or for allocator fragmentation.
    data_dir: where the learned peaks JSON lives; default `memory.paths.user_data_dir()`.
    sample_hz: telemetry sampling rate.
    count_process_rss: on the CPU, make ram_budget the RSS the run may reach: the process's own RSS outside
        the ledger (interpreter, torch, libraries; `MemoryManager.process_baseline`) is taken off it before
        models are placed (`Ledger.models_budget`), and a budget given as all or a share of the available RAM
        is counted above the RSS the process held at start (that RAM was not available). The CLI, GUI and
        sweeps set it. False keeps ram_budget the models' budget alone: what tests sizing a budget from a tiny
        model's bytes, and library callers that budget only their models, mean. No effect on an accelerator.
    """

    device: str = "auto"
    policy: str = "auto"
    vram_budget: str | None = None
    ram_budget: str | None = None
    reserve: str | None = None
    data_dir: Path | None = None
    # >= 20 Hz: per-node peaks on the CPU come from these samples (plus a reading at every boundary).
    sample_hz: float = 20.0
    count_process_rss: bool = False

    def __post_init__(self) -> None:
        policy_named(self.policy)  # raises with the list of names
        for name in ("vram_budget", "ram_budget"):
            value = getattr(self, name)
            try:
                parse_budget(value, 2**40)
            except ValueError as exc:
                raise ValueError(f"{name.replace('_', '-')}: {exc}") from None
        if self.reserve is not None:
            try:
                parse_bytes(self.reserve)
            except ValueError as exc:
                raise ValueError(f"reserve: {exc}") from None
        if self.sample_hz <= 0:
            raise ValueError("sample_hz must be positive")

    def budgets(
        self, device_type: str, host_available: int, device_free: int, process_rss: int = 0
    ) -> Budgets:
        """Budgets in bytes for a device of `device_type` (the reserve taken off the device budget).

        `process_rss`: the process's RSS when `host_available` was read; with `count_process_rss`, a CPU
        budget that is a share of the available RAM lies above it (the RSS the run may reach)."""
        reserve = parse_bytes(self.reserve) if self.reserve else 0
        if device_type == "cpu":
            ram = parse_budget(self.ram_budget, host_available)
            if self.count_process_rss and _fraction(self.ram_budget) is not None:
                ram += process_rss
            return Budgets(max(ram - reserve, 0), None)
        device = max(parse_budget(self.vram_budget, device_free) - reserve, 0)
        return Budgets(device, parse_budget(self.ram_budget, host_available))

    def ignored_settings(self, device_type: str) -> list[str]:
        """Human-readable notes for settings that have no effect on a device of `device_type`."""
        if device_type == "cpu" and self.vram_budget is not None:
            return [
                f"vram-budget {self.vram_budget!r} has no effect on the CPU: there the one budget is "
                "ram-budget (host RAM)"
            ]
        return []


__all__ = ["POLICY_NAMES", "Budgets", "MemoryConfig", "parse_budget", "parse_bytes"]
