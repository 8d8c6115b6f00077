"""The context a node's `run` receives: the services it may use for this one call.

Lives here: `NodeContext`, `Cancelled`, `CancelToken`, `loads_reported_to`. Imports `memory`, `nodes.events`
and `pipelines.load_progress` (the callback type only).
A fresh context is built for every node run (as InvokeAI does), so a node never touches the executor,
the registry or any global. Progress calls are also the cancellation points: `ctx.progress(...)`
raises `Cancelled` once the user has asked to stop.

Model weights are read when a node first *uses* a model, often long after the loader node ran (and in a
later run, from a cached loader): the memory manager reports them as `LoadProgress` telemetry, and
`loads_reported_to` (the executor, around each node) turns them into "load_bytes" progress of the node
running when the bytes are read, where a cancelled run stops the load.
Progress that is not a timed step (bytes, a conversion's stages) is throttled to `UNTIMED_EVERY_S`.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodes.events import NodeLog, NodePreview, NodeProgress, NodeText, RunEvent, progress_kind
from pipelines.load_progress import OnProgress  # what loaders call: (label, done, total); no torch import

if TYPE_CHECKING:  # the manager is passed in; listing node types must not import torch
    from memory import MemoryManager


class Cancelled(Exception):
    """Raised inside a node when the run was cancelled; the executor stops cleanly."""


class CancelToken:
    """A thread-safe flag: the GUI or a Ctrl+C handler sets it, nodes check it between steps.

    `interruptible` is true while a node is in a long call with no steps to check at (a GGUF
    conversion): a Ctrl+C handler on the running thread may then raise `Cancelled` at once.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.interruptible = False

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


# Untimed progress (bytes loaded, conversion stages) is emitted at most this often per task, plus its first
# and last call: a UNet load reads ~700 tensors, and each event costs a queue hop and a repaint in the GUI.
UNTIMED_EVERY_S = 0.1


@contextmanager
def loads_reported_to(memory: MemoryManager, ctx: NodeContext) -> Iterator[None]:
    """While a node runs, the bytes of every model load are its "load_bytes" progress (loads outside any node,
    in a test or a benchmark, report nowhere). A cancelled run raises `Cancelled` inside the load."""

    def report(event: Any) -> None:  # a memory.telemetry.LoadProgress, on this (the compute) thread
        ctx.progress(event.done, event.total, kind="load_bytes", label=event.component)

    unsubscribe = memory.telemetry.subscribe_progress(report)
    try:
        yield
    finally:
        unsubscribe()


class NodeContext:
    def __init__(
        self,
        *,
        node_id: str,
        node_type: str,
        memory: MemoryManager,
        out_dir: Path,
        workflow_json: dict[str, Any],
        emit: Callable[[RunEvent], None],
        cancel: CancelToken,
        allow_pickle: bool = False,
    ) -> None:
        self.node_id = node_id
        self.node_type = node_type
        self.memory = memory
        self.out_dir = out_dir
        # The whole workflow as saved, for embedding in output files (PNG text chunk).
        self.workflow_json = workflow_json
        # Pickle checkpoints (.ckpt/.pt/.bin) can run code when loaded: only with explicit opt-in.
        self.allow_pickle = allow_pickle
        self.files: list[str] = []
        self.metrics: dict[str, float] = {}
        self._emit = emit
        self._cancel = cancel
        self._started = time.perf_counter()
        self._last_step = self._started
        # (kind, label) -> (first call, last emitted) times, for untimed progress.
        self._untimed: dict[tuple[str, str], tuple[float, float]] = {}

    @property
    def device(self) -> Any:
        return self.memory.device

    @property
    def cancelled(self) -> bool:
        return self._cancel.cancelled

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Mark a long call without cancellation points (e.g. a first GGUF conversion) as safe to
        interrupt: `app --run` then stops it on the first Ctrl+C. The call must clean up in `finally`."""
        self.check_cancelled()
        self._cancel.interruptible = True
        try:
            yield
        finally:
            self._cancel.interruptible = False
        self.check_cancelled()

    def check_cancelled(self) -> None:
        if self._cancel.cancelled:
            raise Cancelled(f"cancelled in node {self.node_id!r}")

    def importing(self, *modules: str) -> None:
        """Import those of `modules` this process has not imported yet, saying so first ("importing
        diffusers"): the first model node of a session spends seconds there, which would otherwise show as
        a silent "running…". Node run functions call it before their lazy pipeline imports."""
        saying = ""
        for name in modules:
            if name in sys.modules:
                continue
            package = name.split(".")[0]
            if package != saying:
                if saying:
                    self.progress(1, 1, kind="import", label=saying)
                self.progress(0, 1, kind="import", label=package)
                saying = package
            importlib.import_module(name)
        if saying:
            self.progress(1, 1, kind="import", label=saying)

    def progress_callback(self, kind: str) -> OnProgress:
        """A `(label, done, total)` callback for a long call of this node (a GGUF conversion): it reports
        `kind` progress here and raises `Cancelled` once the run is cancelled."""
        return lambda label, done, total: self.progress(done, total, kind=kind, label=label)

    def progress(
        self, step: int, total: int, *, kind: str = "step", label: str = "", preview: Any = None
    ) -> None:
        """Report that step `step` (1-based) of `total` is done; raises `Cancelled` when asked to stop.

        `kind` is a name in `nodes.events.PROGRESS_KINDS`; untimed kinds (bytes) are throttled here."""
        if not progress_kind(kind).timed:
            self._untimed_progress(step, total, kind, label)
            self.check_cancelled()
            return
        now = time.perf_counter()
        seconds = now - self._last_step
        self._last_step = now
        elapsed = now - self._started
        rate = step / elapsed if elapsed > 0 else 0.0
        self.memory.record_step(self.node_id, kind, step, total, seconds)
        self._emit(NodeProgress(self.node_id, step, total, rate, kind, label))
        if preview is not None:
            self._emit(NodePreview(self.node_id, preview, final=False))
        self.check_cancelled()

    def _untimed_progress(self, done: int, total: int, kind: str, label: str) -> None:
        now = time.perf_counter()
        first, last = self._untimed.get((kind, label), (now, float("-inf")))
        if 0 < done < total and now - last < UNTIMED_EVERY_S:
            return
        if done >= total:
            self._untimed.pop((kind, label), None)  # the next load of the same thing starts afresh
        else:
            self._untimed[(kind, label)] = (first, now)
        rate = done / (now - first) if now > first else 0.0
        self._emit(NodeProgress(self.node_id, done, total, rate, kind, label))

    def text(self, delta: str, *, final: bool = False) -> None:
        """Stream text out (LLM tokens); also a cancellation point."""
        self._emit(NodeText(self.node_id, delta, final))
        self.check_cancelled()

    def preview(self, image: Any, *, final: bool = True) -> None:
        self._emit(NodePreview(self.node_id, image, final))

    def log(self, message: str) -> None:
        self._emit(NodeLog(self.node_id, message))

    def wrote_file(self, path: Path) -> None:
        """Record a file this node wrote; it appears in the event and the run report."""
        self.files.append(str(path))

    def metric(self, name: str, value: float) -> None:
        """A figure for the report (e.g. "ttft_s", "decode_tokens_per_s", "kv_bytes")."""
        self.metrics[name] = float(value)
