"""The server's chats decoded together: one batch on the run thread that chats join and leave between steps.

Lives here: `ChatSpec`, `chat_spec`, `ChatEngine`. Imports `nodes.llm` (LLMGenerate builds the request, so a
chat answers exactly as the graph's node does), `pipelines.llm.{runtime,batch_runtime}`, `pipelines.paths`,
`app.history_file`, `app.server.{jobs,comfy_shapes,openai_chat}`.

When the run thread takes a chat from the queue it opens a `BatchSession` on that chat's model (opened once and
kept, like the executor's cached LoadLLM; the memory manager decides what stays resident) and, before every
decode step, takes each chat now at the front of the queue for the same model into a free slot
(`JobQueue.take_joining`): so chats that arrive while others decode join the running batch instead of waiting
for it, and a graph queued before a chat still runs first. A chat leaves at its own stop; the session ends
when none is left. The memory manager is used only from this thread, as for graph runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.history_file import HistoryEntry, append_history
from app.server.comfy_shapes import history_entry
from app.server.jobs import Job, JobQueue
from app.server.openai_chat import GENERATE, LOAD
from nodes.events import NodeText

if TYPE_CHECKING:
    from memory import MemoryManager
    from nodes.workflow import Workflow
    from pipelines.llm.runtime import GenerationRequest, LLMModel, TextGeneration

log = logging.getLogger("nodeloom.server")
CHAT_SLOTS = 8  # chats decoded at once
CHAT_TOKENS = 512  # each slot's positions at least (prompt + answer); a longer first chat sizes the batch up


@dataclass(frozen=True)
class ChatSpec:
    """What a chat job runs: LoadLLM's fields and the LLMGenerate request."""

    path: str
    keep_quantized: str
    request: GenerationRequest

    @property
    def model_key(self) -> tuple[str, str]:
        return (self.path, self.keep_quantized)


def _values(wf: Workflow, node_id: str, registry: Any) -> dict[str, Any]:
    node = wf.nodes[node_id]
    spec = registry.get(node.type)
    return {**{p.name: p.default for p in spec.params}, **node.params}


def chat_spec(wf: Workflow, registry: Any) -> ChatSpec:
    """The chat graph (`openai_chat.chat_workflow`, checked) -> what the engine runs."""
    from nodes.llm import LLMGenerate

    load = _values(wf, LOAD, registry)
    node = LLMGenerate(llm=None, **_values(wf, GENERATE, registry))  # type: ignore[arg-type]
    return ChatSpec(str(load["path"]), str(load["keep_quantized"]), node.request())


class ChatEngine:
    def __init__(self, memory: MemoryManager, queue: JobQueue, allow_pickle: bool, out_dir: Path) -> None:
        self.memory, self.queue, self.allow_pickle = memory, queue, allow_pickle
        self.out_dir = out_dir
        self._models: dict[tuple[str, str], LLMModel] = {}
        self._open: dict[
            str, int
        ] = {}  # prompt id of each chat in the batch -> the most chats it shared a step with
        self._jobs: dict[str, Job] = {}

    def _llm(self, spec: ChatSpec) -> LLMModel:
        from pipelines.llm.runtime import open_llm
        from pipelines.paths import resolve_model_path

        if spec.model_key not in self._models:
            self._models[spec.model_key] = open_llm(
                self.memory,
                resolve_model_path(spec.path),
                allow_pickle=self.allow_pickle,
                keep_quantized=spec.keep_quantized,
            )
        return self._models[spec.model_key]

    def run(self, first: Job) -> None:
        """Decode `first` and every chat that joins it, until none is left; each is answered as it ends."""
        from pipelines.llm.batch_runtime import BatchSession

        spec: ChatSpec = first.chat
        try:
            llm = self._llm(spec)
            _, context = BatchSession(self.memory, llm, slots=1, max_tokens=1).prepare(spec.request)
        except (ValueError, OSError) as exc:  # a prompt over the model's context, a file that will not open
            self._fail(first, str(exc), refused=True)
            return
        tokens = max(context, CHAT_TOKENS)
        if llm.context_length:
            tokens = max(context, min(tokens, llm.context_length))
        try:
            with BatchSession(self.memory, llm, slots=CHAT_SLOTS, max_tokens=tokens) as session:
                self._add(session, first)
                while session.busy:
                    while session.active < CHAT_SLOTS:
                        job = self.queue.take_joining(lambda j: self._joins(j, spec, session))
                        if job is None:
                            break
                        self._add(session, job)
                    for pid in self._open:
                        self._open[pid] = max(self._open[pid], session.active)
                    session.step()
        except Exception as exc:  # whatever failed, every chat still in the batch gets its answer
            log.exception("chat batch on %s failed", spec.path)
            for job in list(self._jobs.values()):
                self._fail(job, f"{type(exc).__name__}: {exc}")

    def _joins(self, job: Job, spec: ChatSpec, session: Any) -> bool:
        if job.chat is None or job.chat.model_key != spec.model_key:
            return False
        try:
            return session.prepare(job.chat.request)[1] <= session.max_tokens
        except ValueError:
            return True  # refused at once by `_add`, with the reason

    def _add(self, session: Any, job: Job) -> None:
        spec: ChatSpec = job.chat
        on_text: Callable[[str], None] | None = None
        if job.on_event is not None:
            listener = job.on_event

            def on_text(delta: str) -> None:
                listener(NodeText(GENERATE, delta))

        self._open[job.prompt_id], self._jobs[job.prompt_id] = 0, job
        try:
            entry = session.add(
                spec.request,
                on_text=on_text,
                on_done=lambda out: self._answer(job, out),
                cancelled=lambda: job.cancel.cancelled,
            )
        except ValueError as exc:
            self._fail(job, str(exc), refused=True)
            return
        if entry is None:  # cannot happen for a job `_joins` accepted; said plainly if it does
            self._fail(job, "the chat does not fit the running batch's context")

    def _answer(self, job: Job, out: TextGeneration) -> None:
        r = out.result
        metrics = dict(out.metrics)
        metrics["batch_size"] = float(self._open.get(job.prompt_id, 1))  # the most chats decoded with it
        text = out.text.strip()
        self._forget(job)
        status = "interrupted" if job.cancel.cancelled else "success"
        self.queue.finish(job, history_entry(job.row(), {}, status, [], {}))
        self._record(job, text, metrics)
        if job.on_done is not None:
            job.on_done(
                {
                    "ok": status == "success",
                    "prompt_id": job.prompt_id,
                    "status": status,
                    "error": "cancelled" if status != "success" else None,
                    "outputs": {},
                    "texts": {GENERATE: text},
                    "run": {"nodes": {GENERATE: {"metrics": metrics, "stop_reason": r.stop_reason}}},
                    "memory": None,
                }
            )

    def _record(self, job: Job, text: str, metrics: dict[str, float]) -> None:
        """The editor's history file, as a graph run's answer is recorded (its panel lists served chats)."""
        started = time.time() - metrics.get("ttft_s", 0.0)
        report = {"nodes": {GENERATE: {"status": "ok", "metrics": metrics}}}
        entry = HistoryEntry(
            started, f"chat completion (served, {job.prompt_id[9:17]})", job.workflow.to_dict()
        )
        entry.texts, entry.report = {GENERATE: text}, report
        try:
            append_history(self.out_dir, entry)
        except OSError as exc:
            log.warning("could not write the output history: %s", exc)

    def _forget(self, job: Job) -> None:
        self._open.pop(job.prompt_id, None)
        self._jobs.pop(job.prompt_id, None)

    def _fail(self, job: Job, message: str, refused: bool = False) -> None:
        """Answer `job` with `message`; `refused`: the request itself is at fault (OpenAI's 400, not 500)."""
        self._forget(job)
        self.queue.finish(job, history_entry(job.row(), {}, "error", [], {}))
        if job.on_done is not None:
            job.on_done(
                {
                    "ok": False,
                    "prompt_id": job.prompt_id,
                    "status": "error",
                    "error": message,
                    "refused": refused,
                }
            )
