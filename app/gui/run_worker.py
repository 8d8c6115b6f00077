"""Runs the executor off the GUI thread and brings events and telemetry back to it.

Lives here: `RunController`, `TimedEvent`. Imports Qt, `nodes.executor`, `nodes.context`, `memory`.
The worker is a plain thread; executor events and memory telemetry (which arrive on any thread) go into
thread-safe deques, and a ~30 Hz QTimer on the GUI thread drains them into Qt signals. One Executor is
kept across runs so its cache works; it is rebuilt only when the device settings change. Closing while a run
is still inside a node cancels it and leaves the memory manager to the worker, which closes it on its way out.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from memory.config import MemoryConfig
from nodes.context import CancelToken
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow, WorkflowError

DRAIN_MS = 33


@dataclass(frozen=True)
class TimedEvent:
    t: float  # seconds on the telemetry clock
    event: Any


class RunController(QObject):
    run_event = Signal(object)  # TimedEvent, on the GUI thread
    telemetry = Signal(list)  # a batch of memory telemetry records
    run_finished = Signal(object)  # RunResult, or None after a crash
    run_failed = Signal(str, object)  # message, problems (list[Problem] or None)

    def __init__(self, registry: NodeRegistry, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.registry = registry
        self.executor: Any = None
        self.memory: Any = None
        self.settings: MemoryConfig | None = None
        self._unsubscribe: Any = None
        self._events: deque[TimedEvent] = deque()
        self._records: deque[Any] = deque()
        self.embedded_workflow: dict[str, Any] | None = None  # for the next start(): what pictures embed
        self._thread: threading.Thread | None = None
        self._cancel = CancelToken()
        self._outcome: deque[tuple[str, Any]] = deque()
        # Guards the hand-over of the memory manager between close() (GUI thread) and a finishing worker.
        self._lock = threading.Lock()
        self._worker_active = False
        self._close_after_run = False
        self._t0 = time.monotonic()
        self.timer = QTimer(self)
        self.timer.setInterval(DRAIN_MS)
        self.timer.timeout.connect(self.drain)
        self.timer.start()

    # -- executor lifetime ------------------------------------------------------------------------

    def configure(self, settings: MemoryConfig, *, allow_pickle: bool = False) -> None:
        """Keep the executor (and its cache) unless the memory settings changed."""
        if self.executor is not None and settings == self.settings:
            if self.executor.allow_pickle != allow_pickle and not self.running:
                self.executor.allow_pickle = allow_pickle
                # Cached outputs may hold models loaded under the old rule; with pickles now refused, reusing
                # them would quietly bypass the refusal, so the next run loads everything afresh.
                self.executor.clear_cache()
            return
        if self.running:
            raise RuntimeError("cannot change the device while a run is in progress")
        self.close()
        from memory import MemoryManager
        from nodes.executor import Executor

        self.memory = MemoryManager(settings)
        self._unsubscribe = self.memory.telemetry.subscribe(self._records.append)
        self.memory.start_sampler()  # the memory plot is live from the start, not only during runs
        self.executor = Executor(self.registry, self.memory, allow_pickle=allow_pickle)
        self.settings = settings

    def now(self) -> float:
        # One read of the attribute: close() on another thread may set it to None between a check and a use.
        memory = self.memory
        if memory is not None:
            return float(memory.telemetry.now())
        return time.monotonic() - self._t0

    def cached_node_ids(self, wf: Workflow) -> set[str]:
        if self.executor is None:
            return set()
        try:
            return set(self.executor.cached_node_ids(wf))
        except (KeyError, ValueError):
            return set()

    def close(self) -> None:
        """Release the memory manager; if a run is still in a node, cancel it and let the worker close it."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        memory = self.memory
        with self._lock:
            deferred = self._worker_active and memory is not None
            if deferred:
                # The worker may be inside a forward pass on models this manager owns: evicting them from
                # this thread would free weights in use. It closes the manager once executor.run returns.
                self._close_after_run = True
                self._cancel.cancel()
        if memory is not None and not deferred:
            memory.close()
        self.memory = self.executor = self.settings = None

    # -- running ----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, wf: Workflow, out_dir: Path) -> None:
        """Run `wf` on the worker thread; saved pictures embed `embedded_workflow` (the graph as the user drew
        it, set by the caller before each start) or else `wf`."""
        if self.running:
            raise RuntimeError("a run is already in progress")
        assert self.executor is not None, "configure() first"
        self._cancel = CancelToken()
        executor, cancel, memory = self.executor, self._cancel, self.memory
        workflow_json, self.embedded_workflow = self.embedded_workflow, None

        def emit(event: Any) -> None:
            self._events.append(TimedEvent(self.now(), event))

        def work() -> None:
            try:
                result = executor.run(
                    wf, out_dir=out_dir, on_event=emit, cancel=cancel, workflow_json=workflow_json
                )
                self._outcome.append(("ok", result))
            except WorkflowError as exc:
                self._outcome.append(("invalid", exc))
            except Exception as exc:  # the executor reports node failures itself; anything else is a bug
                self._outcome.append(("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            finally:
                with self._lock:  # after this, close() no longer defers to this worker
                    self._worker_active = False
                    close_now, self._close_after_run = self._close_after_run, False
                if close_now and memory is not None:
                    memory.close()

        with self._lock:
            self._worker_active, self._close_after_run = True, False
        self._thread = threading.Thread(target=work, name="nodeloom-run", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.cancel()

    def wait(self, timeout: float = 30.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        self.drain()

    def drain(self) -> None:
        """GUI thread: hand queued events, telemetry and the outcome over as signals."""
        done = bool(self._outcome) and not self.running  # checked first: every event precedes the outcome
        records = []
        while self._records:
            records.append(self._records.popleft())
        if records:
            self.telemetry.emit(records)
        while self._events:
            self.run_event.emit(self._events.popleft())
        if done:
            kind, value = self._outcome.popleft()
            self._thread = None
            if kind == "ok":
                self.run_finished.emit(value)
            elif kind == "invalid":
                self.run_failed.emit(str(value), value.problems)
            else:
                self.run_failed.emit(str(value), None)
