"""The JSON-able run report of a memory manager: device, budget, policy, ledger, timeline, events, peaks.

Lives here: `run_report`. May import: stdlib, memory.config, memory.devices, memory.ledger, memory.telemetry.
`MemoryManager.report` (memory.manager) passes its parts in; the report is read by `app --report` and the GUI.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from memory.config import MemoryConfig
from memory.devices import DeviceReading
from memory.ledger import Ledger
from memory.patches import PatchEvent
from memory.telemetry import (
    LoadEvent,
    NodePeak,
    StepEvent,
    Telemetry,
    TransferEvent,
    UnloadEvent,
    WorkingReserved,
)


def run_report(
    *,
    device: str,
    device_kind: str,
    policy: str,
    config: MemoryConfig,
    ledger: Ledger,
    oom_reserve: int,
    ignored_settings: list[str],
    telemetry: Telemetry,
    device_reading: DeviceReading,
    process_peak_rss: int,
) -> dict[str, Any]:
    ev = telemetry.events

    def rows(kind: type) -> list[dict[str, Any]]:
        return [asdict(e) for e in ev(kind)]

    return {
        "device": device,
        "device_kind": device_kind,
        "policy": policy,
        "initial_policy": config.policy,
        "budget": {
            "device_bytes": ledger.device_budget,
            "host_bytes": ledger.host_budget,
            "reserve": config.reserve,
            "oom_reserve": oom_reserve,
            # The process's own RSS taken off a CPU budget at the last placement (0: not counted).
            "process_baseline": ledger.counted_baseline(),
        },
        "ignored_settings": ignored_settings,
        "ledger": ledger.rows(),
        "device_reading": asdict(device_reading),
        "timeline": [asdict(s) for s in telemetry.samples()],
        "loads": rows(LoadEvent),
        "unloads": rows(UnloadEvent),
        "transfers": rows(TransferEvent),
        "reservations": rows(WorkingReserved),
        "node_peaks": rows(NodePeak),
        "steps": rows(StepEvent),
        "patches": rows(PatchEvent),  # LoRA patches: fused or on the fly, per model (memory.patches)
        # Ours, and the kernel's high-water mark (read, never reset): the larger is the process peak.
        "process_peak_rss": process_peak_rss,
    }
