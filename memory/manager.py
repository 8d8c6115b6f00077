"""MemoryManager: owns the ledger, places models per policy, measures nodes, and reports.

May import: stdlib, torch, memory.* (never nodes, pipelines, app or Qt).

Policies (loosest to strictest; `recover_from_oom` walks this order):
- none: every model used stays on the device; nothing is evicted. A load that doesn't fit raises BudgetExceeded.
- auto: models stay resident while the budget allows. A load that doesn't fit evicts unlocked models, least
  recently used first, giving up only some blocks of a streamable model when that frees enough. A model that
  can't fit even alone is streamed (as many blocks resident as fit).
- sequential: load right before use, unload right after (on an accelerator the weights wait in host RAM
  when the RAM budget allows, else go back to disk). A model that can't fit alone is streamed, as in auto.
- stream: like sequential, but a model with declared blocks keeps only as many blocks resident as the budget
  allows and streams the rest (see memory.policies.stream).
Locked models (inside `use`) are never evicted. Ledger changes happen on the calling (compute) thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import torch

from memory.config import POLICIES, MemoryConfig, parse_budget, parse_bytes
from memory.devices import NvmlProbe, read_device, read_host, resolve_device
from memory.learned import LearnedPeaks
from memory.ledger import ComponentSpec, Ledger, ModelHandle, fmt_bytes
from memory.paths import user_data_dir
from memory.placement import Placer
from memory.scope import NodeScope
from memory.telemetry import LoadEvent, NodePeak, Sample, StepEvent, Telemetry, TransferEvent, UnloadEvent
from memory.weights import header_bytes

__all__ = ["BudgetExceeded", "ComponentSpec", "MemoryManager", "ModelHandle"]


# torch's messages: CUDA/MPS "Tried to allocate 2.00 GiB (GPU 0; ...)", CPU "you tried to allocate 123 bytes".
_TRIED_RE = re.compile(r"[Tt]ried to allocate ([0-9.]+) ?([KMGT]i?B|bytes)")


class BudgetExceeded(MemoryError):
    """A load or reservation can't fit in the budget even after evicting every unlocked model."""

    def __init__(self, what: str, needs: int, has: int, ledger_text: str) -> None:
        self.what, self.needs, self.has, self.ledger_text = what, needs, has, ledger_text
        super().__init__(
            f"{what} needs {fmt_bytes(needs)} but only {fmt_bytes(has)} of the budget can be freed.\n{ledger_text}"
        )


class MemoryManager:
    """One per app (built in app/, passed down). See the module docstring for the policies."""

    def __init__(self, config: MemoryConfig | None = None) -> None:
        self.config = config or MemoryConfig()
        self.device: torch.device = resolve_device(self.config.device)
        self.policy: str = self.config.policy
        self.telemetry = Telemetry()
        self._nvml = NvmlProbe() if self.device.type == "cuda" else None
        host = read_host()
        reserve = parse_bytes(self.config.reserve) if self.config.reserve else 0
        if self.device.type == "cpu":
            device_budget = parse_budget(self.config.ram_budget, host.available) - reserve
            host_budget = None
        else:
            free = read_device(self.device, None).free
            device_budget = parse_budget(self.config.vram_budget, free) - reserve
            host_budget = parse_budget(self.config.ram_budget, host.available)
        self.ledger = Ledger(self.device, max(device_budget, 0), host_budget)
        self.learned = LearnedPeaks(self.config.data_dir or user_data_dir())
        self._placer = Placer(self)
        self._scope: NodeScope | None = None
        self._steps: list[StepEvent] = []
        self.process_peak_rss = host.rss
        self.oom_reserve = 0  # bytes taken off the budget by recover_from_oom (failed allocations)
        self._last_oom_bytes = 0

    # -- properties -------------------------------------------------------------------------------------

    @property
    def budget(self) -> int:
        return self.ledger.device_budget

    @property
    def device_kind(self) -> str:
        """Key for learned peaks: working memory differs between a CPU, an H200 and an M2."""
        if self.device.type == "cuda":
            return f"cuda:{torch.cuda.get_device_name(self.device)}"
        return self.device.type

    # -- registration and use ---------------------------------------------------------------------------

    def register(self, spec: ComponentSpec) -> ModelHandle:
        """Add a component to the ledger (nothing is loaded). The same key returns the same handle."""
        existing = self.ledger.handles.get(spec.key)
        if existing is not None:
            return existing
        weight_bytes = header_bytes(spec.files, spec.cast_dtype, spec.prefixes) if spec.files else None
        handle = ModelHandle(spec, weight_bytes)
        self.ledger.handles[spec.key] = handle
        return handle

    def handle(self, key: str) -> ModelHandle:
        return self.ledger.handles[key]

    @contextmanager
    def use(self, handle: ModelHandle, *, working_bytes: int = 0) -> Iterator[torch.nn.Module]:
        """Place `handle` per policy, lock it, and yield the module ready to run on `self.device`.

        `working_bytes` (activations, KV cache) is reserved next to it for the duration. On exit the model is
        unlocked and, under sequential/stream, unloaded.
        """
        if self.ledger.handles.get(handle.key) is not handle:
            raise KeyError(f"{handle.key!r} is not registered with this manager")
        self.start_sampler()
        window = self._placer.place(handle, working_bytes)
        self.ledger.touch(handle)
        handle.locks += 1
        slot = f"use:{handle.key}"
        self.ledger.working[slot] = self.ledger.working.get(slot, 0) + working_bytes + window
        if self._scope is not None:
            self._scope.saw(handle.key, self.ledger.device_weights())
        try:
            yield handle.module
        finally:
            handle.locks -= 1
            left = self.ledger.working.get(slot, 0) - working_bytes - window
            if left > 0:
                self.ledger.working[slot] = left
            else:
                self.ledger.working.pop(slot, None)
            self._report_stream_transfers(handle)
            if self.policy in ("sequential", "stream") and not handle.is_locked:
                self._placer.evict(handle)

    def _report_stream_transfers(self, handle: ModelHandle) -> None:
        if handle.stream is None:
            return
        if not handle.is_locked:
            handle.stream.release_idle()
        nbytes, seconds = handle.stream.take_transfer_stats()
        if nbytes:
            gbps = nbytes / seconds / 1e9 if seconds > 0 else 0.0
            self.telemetry.emit(TransferEvent(f"{handle.spec.name} (streamed)", nbytes, seconds, gbps))

    # -- working memory ---------------------------------------------------------------------------------

    def reserve_working(self, nbytes: int, what: str) -> None:
        """Reserve `nbytes` of working memory under the name `what`, evicting unlocked models if needed.

        Raises BudgetExceeded (needs X, has Y, and the ledger) if it can't fit. Reserving the same name again
        replaces the earlier amount. Release with `release_working`; whatever a node reserved and didn't
        release is released when its `node_scope` ends.
        """
        current = self.ledger.working.get(what, 0)
        self._placer.make_room(nbytes - current, what, exclude=None)
        self.ledger.working[what] = nbytes
        if self._scope is not None:
            self._scope.reserved.add(what)

    def release_working(self, what: str) -> None:
        self.ledger.working.pop(what, None)

    def estimate_working_bytes(self, node_type: str, model_key: str, shape_key: str, fallback: int) -> int:
        """The measured peak for (device, node type, model, shape) when one exists, else `fallback`."""
        learned = self.learned.get(self.device_kind, node_type, model_key, shape_key)
        return learned if learned is not None else fallback

    # -- nodes and steps --------------------------------------------------------------------------------

    @contextmanager
    def node_scope(self, node_id: str, node_type: str, shape_key: str = "") -> Iterator[None]:
        """Measure one node run: emits NodePeak and, on success, records its working memory as learned.

        Peak: `max_memory_allocated` on CUDA; on CPU the kernel's peak RSS (VmHWM, reset at scope start;
        sampled RSS where that's unavailable). Working memory = peak - baseline - growth of resident weights
        during the scope; it's stored under the keys of the models the node used, joined by "+".
        """
        if self._scope is not None:
            raise RuntimeError(f"node_scope({node_id!r}) inside node_scope({self._scope.node_id!r})")
        self.start_sampler()
        scope = NodeScope(self, node_id, node_type, shape_key)
        self._scope = scope
        ok = False
        try:
            yield
            ok = True
        finally:
            self._scope = None
            for what in scope.reserved:
                self.ledger.working.pop(what, None)
            peak, baseline, working = scope.finish()
            self.telemetry.emit(NodePeak(node_id, node_type, peak, baseline))
            if ok and scope.models:
                model_key = "+".join(sorted(scope.models))
                self.learned.record(self.device_kind, node_type, model_key, shape_key, working)

    def record_step(self, node_id: str, kind: str, index: int, total: int, seconds: float) -> None:
        """Record one step ("sampler_step", "prefill", "decode_token", ...) of a node, with its duration."""
        self.telemetry.emit(StepEvent(node_id, kind, index, total, seconds))

    # -- OOM --------------------------------------------------------------------------------------------

    def is_oom(self, exc: BaseException) -> bool:
        """True for torch's OutOfMemoryError (CUDA), our BudgetExceeded, and allocator failures on CPU/MPS.

        Also remembers the size in the allocator's message ("Tried to allocate 2.00 GiB"), which the next
        `recover_from_oom` holds back from the budget.
        """
        msg = str(exc)
        oom = isinstance(exc, torch.OutOfMemoryError | BudgetExceeded | MemoryError) or (
            isinstance(exc, RuntimeError)
            and ("out of memory" in msg.lower() or "can't allocate memory" in msg)
        )
        if oom:
            match = _TRIED_RE.search(msg)
            unit = match.group(2).removesuffix("bytes") if match else ""
            self._last_oom_bytes = parse_bytes(match.group(1) + unit) if match else 0
        return oom

    def begin_run(self) -> None:
        """Start a run from the configured policy: an OOM retry tightens the policy of the run that hit it,
        not of every later run in a long GUI session. The budget keeps `oom_reserve`: that is a measurement."""
        self.policy = self.config.policy

    def recover_from_oom(self) -> bool:
        """Free every unlocked model and stale reservation, then switch to the next stricter policy.

        The allocation that failed (from the error last seen by `is_oom`) is a measurement the ledger missed:
        its size is added to `oom_reserve` and taken off the budget, so the retry leaves that much free.
        Returns False when the policy was already the strictest (memory is still freed).
        """
        for handle in list(self.ledger.handles.values()):
            if not handle.is_locked:
                self._placer.evict(handle, to_disk=True)
        locked = {f"use:{h.key}" for h in self.ledger.handles.values() if h.is_locked}
        for what in [w for w in self.ledger.working if w not in locked]:
            del self.ledger.working[what]
        if self._last_oom_bytes:
            shortfall = min(self._last_oom_bytes, self.ledger.device_budget)
            self.oom_reserve += shortfall
            self.ledger.device_budget -= shortfall
            self._last_oom_bytes = 0
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        i = POLICIES.index(self.policy)
        if i + 1 >= len(POLICIES):
            return False
        self.policy = POLICIES[i + 1]
        return True

    # -- reporting --------------------------------------------------------------------------------------

    def ledger_text(self) -> str:
        return f"memory policy: {self.policy}\n{self.ledger.text()}"

    def report(self) -> dict[str, Any]:
        """JSON-able run report: device, budget, policy, ledger, timeline, events, node peaks, steps."""
        ev = self.telemetry.events

        def rows(kind: type) -> list[dict[str, Any]]:
            return [asdict(e) for e in ev(kind)]

        return {
            "device": str(self.device),
            "device_kind": self.device_kind,
            "policy": self.policy,
            "initial_policy": self.config.policy,
            "budget": {
                "device_bytes": self.ledger.device_budget,
                "host_bytes": self.ledger.host_budget,
                "reserve": self.config.reserve,
                "oom_reserve": self.oom_reserve,
            },
            "ledger": self.ledger.rows(),
            "device_reading": asdict(read_device(self.device, self._nvml)),
            "timeline": [asdict(s) for s in self.telemetry.samples()],
            "loads": rows(LoadEvent),
            "unloads": rows(UnloadEvent),
            "transfers": rows(TransferEvent),
            "node_peaks": rows(NodePeak),
            "steps": rows(StepEvent),
            "process_peak_rss": max(self.process_peak_rss, read_host().peak_rss or 0),
        }

    # -- sampler and lifetime ---------------------------------------------------------------------------

    def sample(self, t: float) -> Sample:
        """One reading (called from the sampler thread: touches readings only, never the ledger)."""
        host = read_host()
        self.process_peak_rss = max(self.process_peak_rss, host.rss)
        if self.device.type == "cpu":
            return Sample(
                t, host.rss, host.rss, host.total, self.ledger.device_budget, host.rss, host.available
            )
        dev = read_device(self.device, None)
        return Sample(
            t, dev.allocated, dev.reserved, dev.total, self.ledger.device_budget, host.rss, host.available
        )

    def start_sampler(self) -> None:
        self.telemetry.start_sampler(self.sample, self.config.sample_hz)

    def close(self) -> None:
        """Stop the sampler and release every model."""
        self.telemetry.stop_sampler()
        for handle in list(self.ledger.handles.values()):
            handle.locks = 0
            self._placer.evict(handle, to_disk=True)
        self.ledger.working.clear()
        if self._nvml is not None:
            self._nvml.close()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
