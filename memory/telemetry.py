"""Telemetry: event and sample records (frozen dataclasses), the `Telemetry` hub and its sampler thread.

May import: stdlib, torch (through memory.devices).
Subscribers are called from whatever thread produced the record (the compute thread for events, the sampler
thread for samples): keep callbacks cheap; the GUI turns them into queued Qt signals.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# 10 minutes at the default 20 Hz: enough for a long run's timeline without growing without bound.
MAX_SAMPLES = 12000


@dataclass(frozen=True)
class Sample:
    t: float
    device_allocated: int
    device_reserved: int
    device_total: int
    budget: int
    host_rss: int
    host_available: int


@dataclass(frozen=True)
class LoadEvent:
    component: str
    kind: str
    nbytes: int
    seconds: float
    source: str
    target: str
    t: float = 0.0


@dataclass(frozen=True)
class LoadProgress:
    """Bytes of `component` read so far in a load that is under way (`memory.load_progress`). Transient:
    sent to progress subscribers only (`Telemetry.subscribe_progress`), never kept with the records."""

    component: str
    done: int
    total: int  # the ledger's bytes for it; 0 while a whole-module build has not said
    t: float = 0.0


@dataclass(frozen=True)
class UnloadEvent:
    component: str
    nbytes: int
    seconds: float
    t: float = 0.0


@dataclass(frozen=True)
class TransferEvent:
    component: str
    nbytes: int
    seconds: float
    gbps: float
    t: float = 0.0


@dataclass(frozen=True)
class StepEvent:
    """The telemetry record of one pipeline step (`pipelines.steps.Step`), written only by
    `MemoryManager.record_step` from the node's one clock reading; `kind` is a `nodes.events.PROGRESS_KINDS`
    name."""

    node_id: str
    kind: str
    index: int
    total: int
    seconds: float
    t: float = 0.0


@dataclass(frozen=True)
class WorkingReserved:
    """Working memory reserved beside a model for one `use`, and where the figure came from.

    source: "formula" (the pipeline's estimate) or "learned" (the largest peak measured earlier for the same
    device kind, node type, model and shape). measured_bytes: what this use actually took (filled when the
    use ends; -1 when it could not be measured, e.g. outside a node).
    """

    node_id: str
    node_type: str
    component: str
    shape_key: str
    formula_bytes: int
    learned_bytes: int | None
    reserved_bytes: int
    source: str
    measured_bytes: int = -1
    t: float = 0.0


@dataclass(frozen=True)
class NodePeak:
    node_id: str
    node_type: str
    peak_bytes: int
    baseline_bytes: int
    t: float = 0.0


MAX_EVENTS = 200_000

Record = Sample | LoadEvent | UnloadEvent | TransferEvent | StepEvent | NodePeak | WorkingReserved


class Telemetry:
    """Collects records and fans them out to subscribers. Times are seconds since the hub was created.

    `emit` stamps events with `t`; samples carry their own `t`. Lists are guarded by a lock because the
    sampler thread appends samples while the compute thread appends events.
    """

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[Record], None]] = []
        self._progress: list[Callable[[LoadProgress], None]] = []
        self._samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        # Bounded like the samples: a long GUI session emits one StepEvent per decoded token.
        self._events: deque[Record] = deque(maxlen=MAX_EVENTS)
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()
        # Start and stop may come from different threads (the GUI's configure, the compute thread's first
        # `use`): one lock makes "check, then start" a single step.
        self._sampler_lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def subscribe(self, callback: Callable[[Record], None]) -> Callable[[], None]:
        """Call `callback(record)` for every future event and sample. Returns the unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def subscribe_progress(self, callback: Callable[[LoadProgress], None]) -> Callable[[], None]:
        """Call `callback(event)` for every `LoadProgress` from now on; it runs on the loading thread and may
        raise to stop the load. Returns the unsubscribe function."""
        with self._lock:
            self._progress.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._progress:
                    self._progress.remove(callback)

        return unsubscribe

    def progress(self, event: LoadProgress) -> None:
        """Send a load's progress to its subscribers (not stored: ~200 per load would crowd the records)."""
        with self._lock:
            listeners = list(self._progress)
        if listeners:
            event = dataclasses.replace(event, t=self.now())
        for callback in listeners:
            callback(event)  # may raise: a cancelled run stops the load here

    def emit(self, record: Record) -> Record:
        if not isinstance(record, Sample):
            record = dataclasses.replace(record, t=self.now())
        with self._lock:
            if isinstance(record, Sample):
                self._samples.append(record)
            else:
                self._events.append(record)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(record)
        return record

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def events(self, kind: type | None = None) -> list[Any]:
        with self._lock:
            return [e for e in self._events if kind is None or isinstance(e, kind)]

    # -- sampler thread ---------------------------------------------------------------------------------

    def start_sampler(self, read: Callable[[float], Sample], hz: float) -> None:
        """Start the daemon sampler once: it calls `read(t)` at `hz` and emits the sample."""
        with self._sampler_lock:
            if self._sampler is not None:
                return
            stop = threading.Event()
            period = 1.0 / hz

            def loop() -> None:
                while not stop.is_set():
                    self.emit(read(self.now()))
                    stop.wait(period)

            self._stop = stop
            self._sampler = threading.Thread(target=loop, name="nodeloom-memory-sampler", daemon=True)
            self._sampler.start()

    def stop_sampler(self) -> None:
        # Joined under the lock, so a start from another thread can't overlap the old sampler's last sample.
        # The sampler thread never takes this lock (only `_lock`, in emit), so this can't deadlock.
        with self._sampler_lock:
            sampler, self._sampler = self._sampler, None
            self._stop.set()
            if sampler is not None and sampler is not threading.current_thread():
                sampler.join(timeout=5)

    @property
    def sampling(self) -> bool:
        with self._sampler_lock:
            return self._sampler is not None
