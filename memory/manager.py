"""MemoryManager: owns the ledger, places models per policy, measures nodes and uses, and reports.

May import: stdlib, torch, memory.* (never nodes, pipelines, app or Qt).

Policies are values (`memory.policy`): none, auto, sequential, stream, loosest to strictest; an OOM retry
walks that order. What each does is in its flags:
- none: every model used stays on the device; nothing is evicted. A load that doesn't fit raises BudgetExceeded.
- auto: models stay resident while the budget allows. A load that doesn't fit evicts unlocked models, least
  recently used first, giving up only some blocks of a streamable model when that frees enough. A model that
  can't fit even alone is streamed (as many blocks resident as fit).
- sequential: load right before use; unload once the next node to run doesn't use the model (the executor
  passes `next_users` to `node_scope`; outside a node scope: right after the use). On an accelerator the
  weights wait in host RAM when the RAM budget allows, else go back to disk.
- stream: like sequential, but a model with declared blocks keeps only as many blocks resident as the budget
  allows and streams the rest (see memory.policies.stream).
Locked models (inside `use`) are never evicted.

Working memory: `use(handle, working=Working(formula_bytes, shape_key))` reserves the largest peak measured
earlier for (device kind, node type, model, shape) when one exists, else the formula, and records what this
use took. Each reservation is reported (`WorkingReserved`: formula or learned). A node's whole peak is learned
too (beyond its weights, keyed by its first use): a use reserves it when it is larger than the use's own.

The process's own RSS: on the CPU with `config.count_process_rss` (the CLI, GUI and sweeps), the RSS outside
the ledger is measured before each placement and taken off the budget (`process_baseline`, `Ledger.baseline`).

Threads: the ledger, placer and scopes belong to the compute thread (the one running nodes). The sampler
thread calls only `sample`, which reads host/device counters and feeds the lock-guarded peak tracker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memory.config import MemoryConfig
from memory.devices import NvmlProbe, read_device, read_host, resolve_device
from memory.errors import BudgetExceeded, fmt_bytes
from memory.fit import budget_problem
from memory.learned import LearnedPeaks
from memory.ledger import ComponentSpec, Ledger, ModelHandle
from memory.load_progress import ReportingSource
from memory.oom import failed_allocation_bytes, is_oom_error
from memory.patches import LayerPatch, PatchState
from memory.paths import user_data_dir
from memory.peaks import PeakTracker
from memory.placement import Placer
from memory.policy import Policy, policy_named, stricter
from memory.release import return_large_frees
from memory.run_report import run_report
from memory.scope import Meter, NodeScope, working_from
from memory.telemetry import (
    LoadProgress,
    NodePeak,
    Sample,
    StepEvent,
    Telemetry,
    TransferEvent,
)
from memory.weights import header_bytes
from memory.working import Working, record_node_peak, record_use, working_estimate

__all__ = ["BudgetExceeded", "ComponentSpec", "MemoryManager", "ModelHandle", "Working"]


class MemoryManager:
    """One per app (built in app/, passed down). See the module docstring for the policies."""

    def __init__(self, config: MemoryConfig | None = None) -> None:
        self.config = config or MemoryConfig()
        self.device: torch.device = resolve_device(self.config.device)
        self.policy: Policy = policy_named(self.config.policy)
        self.telemetry = Telemetry()
        self._nvml = NvmlProbe() if self.device.type == "cuda" else None
        host = read_host()
        free = host.available if self.device.type == "cpu" else read_device(self.device, None).free
        budgets = self.config.budgets(self.device.type, host.available, free, host.rss)
        self.ledger = Ledger(self.device, budgets.device, budgets.host)
        self.learned = LearnedPeaks(self.config.data_dir or user_data_dir())
        self._placer = Placer(self.ledger, self.device, self.telemetry)
        self._host_peaks = PeakTracker(host.rss)
        self._meter = Meter(self.device, self._host_peaks)
        self._scope: NodeScope | None = None
        self.oom_reserve = 0  # bytes taken off the budget by recover_from_oom (failed allocations)
        # Freed activations and weight copies leave RSS at once instead of staying in glibc's heap (the
        # host figures this manager budgets and learns are RSS). A process setting, as torch's threads are.
        return_large_frees()

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

    @property
    def process_peak_rss(self) -> int:
        """The largest host RSS seen by our own readings (sampler and boundaries) since the manager started."""
        return self._host_peaks.overall

    def ignored_settings(self) -> list[str]:
        return self.config.ignored_settings(self.device.type)

    # -- the process's own RSS ----------------------------------------------------------------------------

    @property
    def counts_baseline(self) -> bool:
        """Whether the process's own RSS is taken off the budget: on the CPU, when the config says so."""
        return self.device.type == "cpu" and self.config.count_process_rss

    def process_baseline(self) -> int:
        """The RSS this process holds that is no ledger entry (interpreter, torch, libraries, tokenizers),
        measured now: the one figure the placer (`Ledger.baseline`) and `app plan` count."""
        held = self.ledger.device_weights() if self.device.type == "cpu" else 0
        return max(read_host().rss - held - self.ledger.host_used(), 0)

    def _measure_baseline(self) -> None:
        # Only while no working memory is reserved: an open use's activations are in the RSS and in its
        # reservation, and would count twice; the figure from before it holds until then.
        if self.counts_baseline and not self.ledger.working:
            self.ledger.baseline = self.process_baseline()

    # -- registration and use ---------------------------------------------------------------------------

    def register(self, spec: ComponentSpec) -> ModelHandle:
        """Add a component to the ledger (nothing is loaded). The same key returns the same handle."""
        existing = self.ledger.handles.get(spec.key)
        if existing is not None:
            return existing
        weight_bytes = header_bytes(spec.files, spec.cast_dtype, spec.prefixes) if spec.files else None
        # Every load reports its bytes as `LoadProgress` (memory.load_progress): tensor by tensor from a
        # source, or 0 before and the ledger's bytes after a whole build (the placer sends those).
        if spec.source is not None:
            spec = dataclasses.replace(spec, source=ReportingSource(spec.source, spec.name, self.telemetry))
            weight_bytes = spec.source.nbytes(spec.dtype)
        if weight_bytes is None:
            weight_bytes = spec.planned_bytes
        handle = ModelHandle(spec, weight_bytes)
        self.ledger.handles[spec.key] = handle
        return handle

    def load_progress(self, component: str, done: int, total: int) -> None:
        """For a builder that reads its own weights (an LLM's state dict): bytes of `component` read so far."""
        self.telemetry.progress(LoadProgress(component, done, total))

    def handle(self, key: str) -> ModelHandle:
        return self.ledger.handles[key]

    def budget_problem(self, keys: Iterable[str]) -> str | None:
        """Why one of these registered models can never fit the device budget (checked before any load), or
        None; from headers only (`memory.fit`), a lower bound that never refuses what a policy could run."""
        handles = [self.ledger.handles[k] for k in keys if k in self.ledger.handles]
        self._measure_baseline()
        return budget_problem(handles, self.ledger, self._placer.can_stream)

    def working_estimate(self, handle: ModelHandle, working: Working) -> tuple[int, int | None]:
        """(bytes to reserve, learned figure or None) for `working` beside `handle` in the current node
        (`memory.working.working_estimate`)."""
        return working_estimate(self.learned, self.device_kind, self._scope, handle, working)

    @contextmanager
    def use(
        self, handle: ModelHandle, *, working_bytes: int = 0, working: Working | None = None
    ) -> Iterator[torch.nn.Module]:
        """Place `handle` per policy, lock it, and yield the module ready to run on `self.device`.

        Working memory (activations) is reserved next to it for the duration: `working` (a formula and a
        shape key; a learned peak replaces the formula once measured) or a fixed `working_bytes`. On exit the
        model is unlocked and, under a policy that unloads after use, unloaded unless the next node uses it.
        """
        if self.ledger.handles.get(handle.key) is not handle:
            raise KeyError(f"{handle.key!r} is not registered with this manager")
        if working is not None and working_bytes:
            raise ValueError("pass working= or working_bytes=, not both")
        self.start_sampler()
        scope = self._scope
        learned: int | None = None
        if working is not None:
            working_bytes, learned = self.working_estimate(handle, working)
            if scope is not None and scope.first_use is None:
                scope.first_use = (handle.spec.learned_key, working.shape_key)
        self._measure_baseline()
        weights_before = self.ledger.device_weights()
        window_open = self._meter.open()
        try:
            try:
                window = self._placer.place(handle, working_bytes, self.policy)
            except BudgetExceeded:
                # A learned peak is a measurement (allocator slack and first-use costs included): it may
                # refine a reservation, but never refuse a run that the formula admits.
                if working is None or learned is None or learned <= working.formula_bytes:
                    raise
                working_bytes, learned = working.formula_bytes, None
                window = self._placer.place(handle, working_bytes, self.policy)
        except BaseException:
            self._meter.close(window_open)
            raise
        weights_after = self.ledger.device_weights()
        self.ledger.touch(handle)
        handle.locks += 1
        slot = f"use:{handle.key}"
        self.ledger.working[slot] = self.ledger.working.get(slot, 0) + working_bytes + window
        if scope is not None:
            scope.saw(handle.key, weights_after)
        ok = False
        try:
            yield handle.module
            ok = True
        finally:
            handle.locks -= 1
            left = self.ledger.working.get(slot, 0) - working_bytes - window
            if left > 0:
                self.ledger.working[slot] = left
            else:
                self.ledger.working.pop(slot, None)
            closed = self._meter.close(window_open)
            measured = working_from(closed, weights_before, weights_after, window)
            if scope is not None and scope.first_use is not None and scope.first_use_peak is None:
                scope.first_use_peak = closed.peak
            if working is not None:
                record_use(
                    self.telemetry,
                    self.learned,
                    self.device_kind,
                    scope,
                    handle,
                    working,
                    working_bytes,
                    learned,
                    measured,
                    ok,
                )
            self._report_stream_transfers(handle)
            if self.policy.unloads_after_use and not handle.is_locked and handle.key not in self._keep():
                self._placer.evict(handle)

    def _keep(self) -> frozenset[str]:
        return self._scope.next_users if self._scope is not None else frozenset()

    def _report_stream_transfers(self, handle: ModelHandle) -> None:
        if handle.stream is None:
            return
        if not handle.is_locked:
            handle.stream.release_idle()
        nbytes, seconds = handle.stream.take_transfer_stats()
        if nbytes:
            gbps = nbytes / seconds / 1e9 if seconds > 0 else 0.0
            self.telemetry.emit(TransferEvent(f"{handle.spec.name} (streamed)", nbytes, seconds, gbps))

    # -- working memory and budget checks ---------------------------------------------------------------

    def reserve_working(self, nbytes: int, what: str) -> None:
        """Reserve `nbytes` of working memory under the name `what`, evicting unlocked models if needed.

        Raises BudgetExceeded (needs X, has Y, and the ledger) if it can't fit. Reserving the same name again
        replaces the earlier amount. Release with `release_working`; whatever a node reserved and didn't
        release is released when its `node_scope` ends.
        """
        self._measure_baseline()
        current = self.ledger.working.get(what, 0)
        self._placer.make_room(nbytes - current, what, None, self.policy)
        self.ledger.working[what] = nbytes
        if self._scope is not None:
            self._scope.reserved.add(what)

    def release_working(self, what: str) -> None:
        self.ledger.working.pop(what, None)

    def check_fits(self, what: str, extra_bytes: int, handle: ModelHandle | None = None) -> None:
        """Fail before loading anything when `extra_bytes` (plus `handle`'s weights) can never fit the budget.

        Under a policy that streams, a streamable model's weights need not be resident, so only
        `extra_bytes` counts for it.
        """
        weights = 0
        if handle is not None and not (self.policy.prefers_streaming and self._placer.can_stream(handle)):
            weights = handle.weight_bytes or 0
        needs = weights + extra_bytes
        self._measure_baseline()
        room = self.ledger.models_budget()
        if needs > room:
            if weights:
                what += f" plus the weights of {handle.spec.name} ({fmt_bytes(weights)})"  # type: ignore[union-attr]
            raise BudgetExceeded(what, needs, room, self.ledger_text(), self.ledger.baseline_note())

    # -- weight patches ---------------------------------------------------------------------------------

    def patch(
        self, handle: ModelHandle, layers: dict[str, LayerPatch], *, mode: str, signature: tuple
    ) -> PatchState:
        """`memory.patches.apply_patches` on the placed `handle`, with what a fused patch keeps counted in the
        ledger as `handle`'s bytes (room made first, per the policy: `Placer.patch`) until `unpatch`."""
        self._measure_baseline()
        return self._placer.patch(handle, layers, mode, signature, self.policy)

    def unpatch(self, handle: ModelHandle) -> PatchState | None:
        """`memory.patches.remove_patches` on `handle`'s module; the ledger lets go of what the patch kept."""
        return self._placer.unpatch(handle)

    # -- nodes and steps --------------------------------------------------------------------------------

    @contextmanager
    def node_scope(self, node_id: str, node_type: str, *, next_users: Iterable[str] = ()) -> Iterator[None]:
        """Measure one node run (emits NodePeak) and apply the policy at its end.

        `next_users`: keys of the models the next node to run will use; a policy that unloads after use keeps
        those and unloads every other unlocked model when the scope ends. Shapes are declared per use
        (`Working`).
        """
        if self._scope is not None:
            raise RuntimeError(f"node_scope({node_id!r}) inside node_scope({self._scope.node_id!r})")
        self.start_sampler()
        scope = NodeScope(
            node_id, node_type, self._meter, self.ledger.device_weights(), frozenset(next_users)
        )
        self._scope = scope
        ok = False
        try:
            yield
            ok = True
        finally:
            self._scope = None
            # What the node reserved outside its uses (a KV cache) is planned on its own: not part of its peak.
            reserved = sum(self.ledger.working.pop(what, 0) for what in scope.reserved)
            measurement = scope.finish(self.ledger.device_weights())
            self.telemetry.emit(NodePeak(node_id, node_type, measurement.peak, measurement.baseline))
            if ok:
                record_node_peak(self.learned, self.device_kind, scope, measurement, reserved)
            if self.policy.unloads_after_use:
                for handle in list(self.ledger.handles.values()):
                    if not handle.is_locked and handle.key not in scope.next_users:
                        self._placer.evict(handle)

    def record_step(self, node_id: str, kind: str, index: int, total: int, seconds: float) -> None:
        """Record one step ("sampler_step", "prefill", "decode_token", ...) of a node, with its duration."""
        self.telemetry.emit(StepEvent(node_id, kind, index, total, seconds))

    # -- OOM --------------------------------------------------------------------------------------------

    def is_oom(self, exc: BaseException) -> bool:
        """True for torch's OutOfMemoryError (CUDA), our BudgetExceeded, and allocator failures on CPU/MPS."""
        return is_oom_error(exc)

    def begin_run(self) -> None:
        """Start a run from the configured policy: an OOM retry tightens the policy of the run that hit it,
        not of every later run in a long GUI session. The budget keeps `oom_reserve`: that is a measurement."""
        self.policy = policy_named(self.config.policy)

    def recover_from_oom(self, exc: BaseException | None = None) -> bool:
        """Free every unlocked model and stale reservation, then switch to the next stricter policy.

        The allocation that failed (the size in `exc`'s message) is a measurement the ledger missed: it is
        added to `oom_reserve` and taken off the budget, so the retry leaves that much free.
        Returns False when the policy was already the strictest (memory is still freed).
        """
        for handle in list(self.ledger.handles.values()):
            if not handle.is_locked:
                self._placer.evict(handle, to_disk=True)
        locked = {f"use:{h.key}" for h in self.ledger.handles.values() if h.is_locked}
        for what in [w for w in self.ledger.working if w not in locked]:
            del self.ledger.working[what]
        failed = failed_allocation_bytes(exc) if exc is not None else 0
        if failed:
            shortfall = min(failed, self.ledger.device_budget)
            self.oom_reserve += shortfall
            self.ledger.device_budget -= shortfall
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        nxt = stricter(self.policy)
        if nxt is None:
            return False
        self.policy = nxt
        return True

    # -- reporting --------------------------------------------------------------------------------------

    def ledger_text(self) -> str:
        return f"memory policy: {self.policy.name}\n{self.ledger.text()}"

    def report(self) -> dict[str, Any]:
        """JSON-able run report: device, budget, policy, ledger, timeline, events, node peaks, steps."""
        return run_report(
            device=str(self.device),
            device_kind=self.device_kind,
            policy=self.policy.name,
            config=self.config,
            ledger=self.ledger,
            oom_reserve=self.oom_reserve,
            ignored_settings=self.ignored_settings(),
            telemetry=self.telemetry,
            device_reading=read_device(self.device, self._nvml),
            process_peak_rss=max(self.process_peak_rss, read_host().peak_rss or 0),
        )

    # -- sampler and lifetime ---------------------------------------------------------------------------

    def sample(self, t: float) -> Sample:
        """One reading (called from the sampler thread: touches readings and the peak tracker, never the
        ledger; the budget is one int read)."""
        host = read_host()
        self._host_peaks.observe(host.rss)
        budget = self.ledger.device_budget
        if self.device.type == "cpu":
            return Sample(t, host.rss, host.rss, host.total, budget, host.rss, host.available)
        dev = read_device(self.device, None)
        return Sample(t, dev.allocated, dev.reserved, dev.total, budget, host.rss, host.available)

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
