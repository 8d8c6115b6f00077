"""The ledger: every registered component, its exact weight bytes, where they live, who holds it.

May import: stdlib, torch, memory.errors.
The ledger is changed from one thread only (the compute thread, through MemoryManager). Other threads read
readings, never the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory.errors import fmt_bytes

__all__ = ["ComponentSpec", "Ledger", "ModelHandle", "fmt_bytes"]


@dataclass(frozen=True)
class ComponentSpec:
    """What a pipeline declares about one model component; memory/ reads it and never imports model classes.

    key: stable unique id (e.g. f"{path}#unet@float32", built by `pipelines.model_keys`); registering the
        same key again returns the same handle.
    peak_key: what learned working-memory peaks are stored under: the same component wherever its files
        live (`pipelines.model_keys`); "" means `key`.
    name: display name ("unet", "text_encoder_2", "llm"). kind: "denoiser" | "text_encoder" | "vae" | "llm" | ...
    build: builds a new module on CPU from disk (memory-mapped) on every call; never moves it to a device and
        never returns a cached instance: an evicted module is stripped of its tensors and rebuilt on next use.
    files: safetensors files holding exactly this component's weights; weight bytes come from their headers.
    dtype: the dtype it runs in (cast on load); bytes are accounted at this dtype.
    blocks: dotted paths of ModuleLists whose items can be streamed block by block.
    prefixes: when `files` hold more than this component (a single-file checkpoint), the key prefixes that
        are its weights ("model.diffusion_model."); weight bytes then count only those keys. Key names in
        such files differ from the module's, so on CPU these components are not streamed from disk.
    source: a `memory.weights.WeightSource`. When given, `build` returns the module empty (meta tensors) and
        the manager fills it from the source one tensor at a time, or only its resident part when streaming;
        weight bytes come from `source.nbytes(dtype)`.
    storage: "" for plain weights; else the label of a quantized storage format ("fp8_e4m3fn", "int8",
        "gguf"): `build` returns the module with its weights already in that format and hooks that upcast
        each layer to `dtype` right before its forward. The manager then never casts it and counts the bytes
        as stored; the module may declare `_nodeloom_upcast_bytes` (its largest layer at `dtype`), which is
        reserved as working memory while it runs.
    """

    key: str
    name: str
    kind: str
    build: Callable[[], torch.nn.Module]
    files: tuple[Path, ...] = ()
    dtype: torch.dtype = torch.float32
    blocks: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    source: Any = None
    storage: str = ""
    peak_key: str = ""
    # Bytes before the build where `files` cannot say them (8-bit storage, estimated from the headers by
    # pipelines): what the plan and budget checks count; the build's exact bytes replace it.
    planned_bytes: int | None = None

    @property
    def learned_key(self) -> str:
        """The model part of a learned peak's key."""
        return self.peak_key or self.key

    @property
    def cast_dtype(self) -> torch.dtype | None:
        """The dtype the manager casts floating weights to on load; None: keep them as built (quantized)."""
        return None if self.storage else self.dtype


class ModelHandle:
    """One ledger entry. Lazy: nothing is built until the manager is asked to `use` it.

    Byte fields say where the weights are right now: `device_bytes` on the execution device (on a CPU-only
    machine: materialised in RAM), `host_bytes` in pageable host memory, `pinned_bytes` in page-locked host
    memory. Whatever is counted nowhere is on disk, memory-mapped. `locks` > 0 means in use: never evicted.
    """

    def __init__(self, spec: ComponentSpec, weight_bytes: int | None) -> None:
        self.spec = spec
        self.weight_bytes = weight_bytes
        self.module: torch.nn.Module | None = None
        self.device_bytes = 0
        self.host_bytes = 0
        self.pinned_bytes = 0
        self.locks = 0
        self.last_used = 0
        self.stream: Any = None  # memory.policies.stream.StreamState while partially resident

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def is_locked(self) -> bool:
        return self.locks > 0

    @property
    def locked(self) -> int:
        """How many `use` blocks hold it right now."""
        return self.locks

    @property
    def location(self) -> str:
        total = self.weight_bytes or 0
        if self.device_bytes and self.device_bytes >= total:
            return "device"
        if self.device_bytes:
            return "partial"
        if self.pinned_bytes:
            return "pinned"
        if self.host_bytes:
            return "host"
        return "disk"

    def __repr__(self) -> str:
        return (
            f"ModelHandle({self.key!r}, {self.location}, weight_bytes={self.weight_bytes}, "
            f"device_bytes={self.device_bytes}, locks={self.locks})"
        )


class Ledger:
    """Handles by key plus working-memory reservations, against a device budget (and a host budget on
    accelerators, where host copies are a second tier). Invariant kept by the manager:
    `device_used() <= models_budget()` after every change.

    `baseline`: on a CPU, the RSS the process holds that is no ledger entry (interpreter, torch, libraries),
    counted against the budget there, since the budget is host RAM (`models_budget`); an accelerator's budget
    is its own memory, which the baseline does not touch. Set by its owner (the manager measures it, a plan
    passes the one it measured); 0 means not counted.
    """

    def __init__(
        self, device: torch.device, device_budget: int, host_budget: int | None, baseline: int = 0
    ) -> None:
        self.device = device
        self.device_budget = device_budget
        self.host_budget = host_budget
        self.baseline = baseline
        self.handles: dict[str, ModelHandle] = {}
        self.working: dict[str, int] = {}
        self._tick = 0

    def touch(self, handle: ModelHandle) -> None:
        # A counter, not a clock: LRU needs an order, and two uses in the same clock tick must still differ.
        self._tick += 1
        handle.last_used = self._tick

    def device_weights(self) -> int:
        return sum(h.device_bytes for h in self.handles.values())

    def device_used(self) -> int:
        return self.device_weights() + sum(self.working.values())

    def counted_baseline(self) -> int:
        """The process's own RSS taken off the device budget: the baseline on a CPU, 0 on an accelerator."""
        return self.baseline if self.device.type == "cpu" else 0

    def models_budget(self) -> int:
        """What the budget leaves for models and working memory: on a CPU the RAM budget less the process's
        own RSS (so the run's RSS stays within the RAM budget), on an accelerator the whole device budget."""
        return max(self.device_budget - self.counted_baseline(), 0)

    def baseline_note(self) -> str:
        """For a message about a budget too small: what the process itself holds of it, or ""."""
        held = self.counted_baseline()
        if not held:
            return ""
        return f"the process itself holds {fmt_bytes(held)} of the {fmt_bytes(self.device_budget)} budget"

    def device_free(self) -> int:
        return self.models_budget() - self.device_used()

    def host_used(self) -> int:
        return sum(h.host_bytes + h.pinned_bytes for h in self.handles.values())

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "key": h.key,
                "name": h.spec.name,
                "kind": h.spec.kind,
                "dtype": h.spec.storage or str(h.spec.dtype).removeprefix("torch."),
                "weight_bytes": h.weight_bytes,
                "location": h.location,
                "device_bytes": h.device_bytes,
                "host_bytes": h.host_bytes,
                "pinned_bytes": h.pinned_bytes,
                "locked": h.locks,
                "last_used": h.last_used,
            }
            for h in self.handles.values()
        ]

    def text(self) -> str:
        """A table for humans and error messages: what is where and how big."""
        dev = "RAM" if self.device.type == "cpu" else str(self.device)
        lines = [
            f"{'component':<28} {'kind':<13} {'dtype':<9} {'weights':>11} {'where':<8} {'on ' + dev:>11} lock",
        ]
        for r in self.rows():
            lines.append(
                f"{r['name'][:28]:<28} {r['kind'][:13]:<13} {r['dtype']:<9} {fmt_bytes(r['weight_bytes']):>11} "
                f"{r['location']:<8} {fmt_bytes(r['device_bytes']):>11} {r['locked'] or ''}"
            )
        for what, n in self.working.items():
            lines.append(f"{'working: ' + what:<52} {'':>11} {'':<8} {fmt_bytes(n):>11}")
        held = self.counted_baseline()
        lines.append(
            f"{dev} used {fmt_bytes(self.device_used())} of budget {fmt_bytes(self.device_budget)}"
            + (f" less the process's own {fmt_bytes(held)}" if held else "")
            + f" (free {fmt_bytes(self.device_free())})"
        )
        if self.host_budget is not None:
            lines.append(f"host copies {fmt_bytes(self.host_used())} of budget {fmt_bytes(self.host_budget)}")
        return "\n".join(lines)
