"""The server's queue of runs and its history of finished ones, shared by the handlers and the run thread.

Lives here: `Job`, `JobQueue`. Imports the standard library and `nodes.workflow` (types only).

ComfyUI's queue is a heap ordered by `number`: a request's own `number` wins, else a counter that
`front: true` negates, so it runs before everything queued normally. The same order here, FIFO among equal
numbers. The running job stays listed (`queue_running`) until it ends; `delete` drops pending jobs by id,
`wipe` drops every pending one; cancelling the running one is `interrupt`. Every method takes the lock:
the handlers (event loop thread) and the worker (run thread) share one instance.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodes.context import CancelToken

if TYPE_CHECKING:
    from nodes.workflow import Workflow

MAX_HISTORY = 1000  # ComfyUI keeps 10000; each entry here holds its prompt, so fewer
MAX_PENDING = 1000  # a client looping on POST /prompt must not queue without bound (each job holds its graph)


@dataclass
class Job:
    """One queued run. `prompt` is what the client sent (ComfyUI API graph, or our workflow for /run)."""

    number: float
    prompt_id: str
    prompt: dict[str, Any]
    extra_data: dict[str, Any]
    outputs: list[str]  # the output nodes it runs, ComfyUI's `outputs_to_execute`
    workflow: Workflow
    client_id: str | None = None
    native: bool = False  # POST /run: the reply waits for the result
    cancel: CancelToken = field(default_factory=CancelToken)
    on_done: Callable[[dict[str, Any]], None] | None = None
    on_event: Callable[[Any], None] | None = None  # every executor event too, on the run thread (streaming)
    chat: Any = (
        None  # an OpenAI chat (`chat_engine.ChatSpec`): run in the batched decode loop, not the executor
    )

    def row(self) -> list[Any]:
        """ComfyUI's queue row: `[number, prompt_id, prompt, extra_data, outputs_to_execute]`."""
        return [self.number, self.prompt_id, self.prompt, self.extra_data, self.outputs]


class JobQueue:
    def __init__(self, max_history: int = MAX_HISTORY, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, Job]] = []
        self._order = itertools.count()  # FIFO among equal numbers
        self._counter = 0  # ComfyUI's `self.number`
        self.running: Job | None = None
        self.joined: list[Job] = []  # chats taken into the running chat batch (`take_joining`)
        self.history: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._max_history = max_history
        self._closed = False
        self.listeners: list[Callable[[], None]] = []  # told when the queue changes (the status message)

    def next_number(self, front: bool) -> int:
        with self._lock:
            number = self._counter
            self._counter += 1
        return -number if front else number

    def put(self, job: Job) -> None:
        with self._lock:
            heapq.heappush(self._heap, (job.number, next(self._order), job))
            self._lock.notify_all()
        self._changed()

    def take(self, timeout: float | None = None) -> Job | None:
        """Block until a job is queued (or the queue is closed: None); it becomes `running`."""
        with self._lock:
            while not self._heap and not self._closed:
                if not self._lock.wait(timeout):
                    return None
            if self._closed:
                return None
            _, _, job = heapq.heappop(self._heap)
            self.running = job
        self._changed()
        return job

    def take_joining(self, accepts: Callable[[Job], bool]) -> Job | None:
        """The front pending job if `accepts(job)` (a chat that can join the running batch), else None: only
        the front, so a chat never jumps ahead of a graph queued before it."""
        with self._lock:
            if self._closed or not self._heap or not accepts(self._heap[0][2]):
                return None
            _, _, job = heapq.heappop(self._heap)
            self.joined.append(job)
        self._changed()
        return job

    def finish(self, job: Job, entry: dict[str, Any]) -> None:
        """`job` ended: its ComfyUI history entry is kept (oldest dropped past the limit)."""
        with self._lock:
            self.history[job.prompt_id] = entry
            while len(self.history) > self._max_history:
                self.history.popitem(last=False)
            if self.running is job:
                self.running = None
            self.joined = [j for j in self.joined if j is not job]
        self._changed()

    def running_jobs(self) -> list[Job]:
        """The job the run thread took and the chats that joined its batch."""
        with self._lock:
            return [j for j in (self.running, *self.joined) if j is not None]

    def pending(self) -> list[Job]:
        with self._lock:
            return [job for _, _, job in sorted(self._heap)]

    def full(self) -> bool:
        with self._lock:
            return len(self._heap) >= self.max_pending

    def remaining(self) -> int:
        """ComfyUI's `queue_remaining`: pending plus the one running."""
        with self._lock:
            return len(self._heap) + (self.running is not None) + len(self.joined)

    def known(self, prompt_id: str) -> bool:
        with self._lock:
            return (
                prompt_id in self.history
                or (self.running is not None and self.running.prompt_id == prompt_id)
                or any(job.prompt_id == prompt_id for job in self.joined)
                or any(job.prompt_id == prompt_id for _, _, job in self._heap)
            )

    def delete(self, prompt_ids: list[str]) -> list[Job]:
        """Drop pending jobs by id; returns the ones dropped (a running job is interrupted instead)."""
        wanted = set(prompt_ids)
        with self._lock:
            dropped = [job for _, _, job in self._heap if job.prompt_id in wanted]
            self._heap = [item for item in self._heap if item[2].prompt_id not in wanted]
            heapq.heapify(self._heap)
        if dropped:
            self._changed()
        return dropped

    def wipe(self) -> list[Job]:
        with self._lock:
            dropped = [job for _, _, job in self._heap]
            self._heap = []
        if dropped:
            self._changed()
        return dropped

    def interrupt(self, prompt_id: str | None = None) -> bool:
        """Cancel the running job (only if it is `prompt_id`, when given); True when one was cancelled."""
        with self._lock:
            job = self.running
        if job is None or (prompt_id is not None and job.prompt_id != prompt_id):
            return False
        job.cancel.cancel()
        return True

    def history_items(self, max_items: int | None = None, offset: int = 0) -> dict[str, dict[str, Any]]:
        with self._lock:
            items = list(self.history.items())
        items = items[offset:] if offset > 0 else items
        if max_items is not None:
            items = items[-max_items:] if max_items > 0 else []
        return dict(items)

    def history_delete(self, prompt_ids: list[str] | None) -> None:
        with self._lock:
            if prompt_ids is None:
                self.history.clear()
            for pid in prompt_ids or ():
                self.history.pop(pid, None)

    def close(self) -> None:
        """Wake the worker to stop; the jobs still queued are dropped (and returned, to be answered)."""
        with self._lock:
            self._closed = True
            dropped = [job for _, _, job in self._heap]
            self._heap = []
            self._lock.notify_all()
            running = [j for j in (self.running, *self.joined) if j is not None]
        for job in running:
            job.cancel.cancel()
        for job in dropped:
            if job.on_done is not None:
                job.on_done({"ok": False, "error": "the server is shutting down"})

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()
