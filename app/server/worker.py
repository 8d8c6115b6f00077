"""The one run thread: takes jobs from the queue and runs them with the server's one executor and memory
manager, so models stay resident across requests under the memory policy.

Lives here: `RunWorker`, `memory_summary`. Imports `memory`, `nodes.executor`, `app.history_file`,
`app.server.*`.

Around each run it sends ComfyUI's `execution_start`, `execution_cached`, then (from `messages`) the node
messages, then `execution_success`, `execution_error` or `execution_interrupted`, and last `executing` with
`node: null`, the end marker ComfyUI's example client waits for. The finished job goes into the queue's
history (ComfyUI's shape) and into the editor's history file in the output folder. A run that fails, or a
bug that raises, is reported to its client and the log; the thread carries on with the next job.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.history_file import HistoryEntry, append_history, seeds_of, video_poster, with_figures
from app.server.comfy_shapes import history_entry, now_ms
from app.server.jobs import Job, JobQueue
from app.server.messages import RunMessages
from app.server.options import ServeOptions
from memory import MemoryManager
from memory.telemetry import Sample
from nodes.executor import Executor, RunResult
from nodes.registry import NodeRegistry
from nodes.workflow import WorkflowError

log = logging.getLogger("nodeloom.server")
SendTo = Callable[[str, dict[str, Any], str | None], None]  # (type, data, client id or None for everyone)


def memory_summary(memory: MemoryManager, records: list[Any], t0: float) -> dict[str, Any]:
    """One request's memory telemetry: the events its run caused and the peaks sampled while it ran."""
    events: dict[str, list[dict[str, Any]]] = {}
    peak_host = peak_device = 0
    for record in records:
        if isinstance(record, Sample):
            peak_host = max(peak_host, record.host_rss)
            peak_device = max(peak_device, record.device_allocated)
            continue
        name = type(record).__name__
        events.setdefault(name, []).append(dataclasses.asdict(record))
    return {
        "device": str(memory.device),
        "policy": memory.policy.name,
        "budget_bytes": memory.ledger.device_budget,
        "resident": memory.ledger.rows(),
        "events": events,
        "peak_host_rss": peak_host,
        "peak_device_allocated": peak_device,
        "seconds": round(memory.telemetry.now() - t0, 4),
    }


class RunWorker:
    def __init__(self, options: ServeOptions, registry: NodeRegistry, queue: JobQueue, send: SendTo) -> None:
        self.options = options
        self.registry = registry
        self.queue = queue
        self.send = send
        self.memory = MemoryManager(options.memory)
        self.memory.start_sampler()  # per-request peaks come from its samples
        self.executor = Executor(registry, self.memory, allow_pickle=options.allow_pickle)
        self._thread = threading.Thread(target=self._loop, name="nodeloom-serve-run", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the run in flight (cancelled), then release every model."""
        self.queue.close()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self.memory.close()

    def _loop(self) -> None:
        while (job := self.queue.take()) is not None:
            try:
                self._run(job)
            except Exception:  # a bug here must not end the thread: the server would queue forever
                log.exception("run %s: unexpected error", job.prompt_id)
                self.queue.finish(job, history_entry(job.row(), {}, "error", [], {}))
                if job.on_done is not None:
                    job.on_done({"ok": False, "error": "internal error (see the server log)"})

    def _run(self, job: Job) -> None:
        pid, sid, wf = job.prompt_id, job.client_id, job.workflow
        history: list[list[Any]] = []

        def say(kind: str, data: dict[str, Any]) -> None:
            if kind.startswith("execution_"):  # ComfyUI's history keeps the run-level messages
                history.append([kind, data])
            self.send(kind, data, sid)

        messages = RunMessages(pid, say, self.options.out_dir, self.options.temp_dir)
        say("execution_start", {"prompt_id": pid, "timestamp": now_ms()})
        try:
            cached = sorted(self.executor.cached_node_ids(wf) & set(self.executor.plan(wf)))
        except (KeyError, ValueError):
            cached = []
        say("execution_cached", {"nodes": cached, "prompt_id": pid, "timestamp": now_ms()})
        records: list[Any] = []
        listener = job.on_event

        def on_event(event: Any) -> None:
            messages(event)
            if listener is not None:
                listener(event)

        unsubscribe = self.memory.telemetry.subscribe(records.append)
        t0 = self.memory.telemetry.now()
        started = time.time()
        result: RunResult | None = None
        error: str | None = None
        try:
            result = self.executor.run(wf, out_dir=self.options.out_dir, on_event=on_event, cancel=job.cancel)
        except WorkflowError as exc:
            error = str(exc)
        except Exception as exc:  # the executor reports node failures itself; anything else is logged
            log.exception("run %s failed outside any node", pid)
            error = f"{type(exc).__name__}: {exc}"
        finally:
            unsubscribe()
        memory = memory_summary(self.memory, records, t0)
        if result is not None:
            for nid, node in result.nodes.items():  # cached outputs are listed too, as ComfyUI's history does
                if node.status == "cached" and nid not in messages.outputs:
                    output = messages.node_output(nid, node.files)
                    if output:
                        messages.outputs[nid] = output
        status = self._say_end(job, messages, result, error, say)
        # The history first, as ComfyUI does: a client fetches /history/{id} as soon as it sees the end marker.
        meta = {
            nid: {"node_id": nid, "display_node": nid, "parent_node": None, "real_node_id": nid}
            for nid in messages.outputs
        }
        self.queue.finish(job, history_entry(job.row(), messages.outputs, status, history, meta))
        self._record(job, result, messages, started)
        self.send("executing", {"node": None, "prompt_id": pid}, sid)
        if job.on_done is not None:
            job.on_done(
                {
                    "ok": status == "success",
                    "prompt_id": pid,
                    "status": status,
                    "error": error or (result.error if result is not None else None),
                    "outputs": messages.outputs,
                    "texts": {
                        nid: values["text"]
                        for nid, values in (result.outputs if result is not None else {}).items()
                        if isinstance(values, dict) and isinstance(values.get("text"), str)
                    },
                    "run": result.to_json() if result is not None else None,
                    "memory": memory,
                }
            )

    def _say_end(
        self,
        job: Job,
        messages: RunMessages,
        result: RunResult | None,
        error: str | None,
        say: Callable[[str, dict[str, Any]], None],
    ) -> str:
        pid = job.prompt_id
        if result is not None and result.ok:
            say("execution_success", {"prompt_id": pid, "timestamp": now_ms()})
            return "success"
        failed = messages.failure
        node_id = failed.node_id if failed else (result.failed_node if result else None) or messages.current
        node_type = failed.node_type if failed else ""
        base = {"prompt_id": pid, "node_id": node_id, "node_type": node_type, "executed": messages.executed}
        if result is not None and result.cancelled:
            say("execution_interrupted", {**base, "timestamp": now_ms()})
            return "interrupted"
        message = failed.message if failed else (error or (result.error if result else None) or "failed")
        say(
            "execution_error",
            {
                **base,
                "exception_message": message,
                "exception_type": failed.error_type if failed else "WorkflowError",
                "traceback": [],  # never sent: the message names node and field
                "current_inputs": {},
                "current_outputs": {},
                "timestamp": now_ms(),
            },
        )
        return "error"

    def _record(self, job: Job, result: RunResult | None, messages: RunMessages, started: float) -> None:
        """The editor's history file: what this run made (not what the cache served), with its graph."""
        if result is None:
            return
        files = [f for r in result.nodes.values() if r.status != "cached" for f in r.files]
        if not (files or messages.texts):
            return
        title = job.workflow.meta.get("title")
        title = title[:100] if isinstance(title, str) and title.strip() else "request"
        label = f"{title} (served, {job.prompt_id[:8]})"
        entry = HistoryEntry(
            started,
            label,
            job.workflow.to_dict(),
            seeds_of(job.workflow, self.registry),
            files,
            dict(messages.texts),
            with_figures(result.to_json()),
        )
        entry.poster = video_poster(self.options.out_dir, entry.report)
        try:
            append_history(self.options.out_dir, entry)
        except OSError as exc:
            log.warning("could not write the output history: %s", exc)
