"""Several generation requests decoded together on one loaded LLM: what the LLM node's list of prompts and
the server's chats use.

Lives here: `BatchSession`, `BatchEntry`, `generate_texts`. Imports `memory`, `pipelines.llm.{runtime,chat,
detokenize,generate,kv_cache,scheduler}`; never nodes/, app/ or Qt.

A session holds the model (`memory.use`) and a batched KV cache of `slots` x `max_tokens`, reserved as
working memory for its whole life. `add` puts a request in (False when it cannot fit a slot: the caller
keeps it for a later session); `step` admits and decodes once; each request's text streams through its own
detokenizer and stop strings, exactly as `generate_text` does for one, so its answer is the same text. A
model without the compact decoder (the float32 transformers path) cannot share a step: the session then
runs its requests one after another, each whole, one per `step`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from memory import MemoryManager, fmt_bytes
from pipelines.llm.chat import build_prompt_ids
from pipelines.llm.detokenize import TextStream
from pipelines.llm.generate import GenerationResult, generate
from pipelines.llm.kv_cache import KVCache
from pipelines.llm.runtime import GenerationRequest, LLMModel, TextGeneration, _context_size
from pipelines.llm.scheduler import BatchScheduler, Sequence, SequenceRequest

DEFAULT_SLOTS = 8  # sequences decoded at once; the batch benchmark's size


@dataclass
class BatchEntry:
    """One request in a session: its stream, and once done its `TextGeneration`."""

    request: GenerationRequest
    prompt_ids: list[int]
    context: int
    stream: TextStream
    on_text: Callable[[str], None] | None = None
    on_done: Callable[[TextGeneration], None] | None = None
    cancelled: Callable[[], bool] | None = None
    sequence: Sequence | None = None
    done: TextGeneration | None = None
    tokens_seen: int = field(default=0)


class BatchSession:
    """`with BatchSession(memory, llm, slots=8, max_tokens=N) as session: session.add(...); session.step()`."""

    def __init__(self, memory: MemoryManager, llm: LLMModel, *, slots: int, max_tokens: int) -> None:
        self.memory, self.llm = memory, llm
        self.slots, self.max_tokens = slots, max_tokens
        self.kv_reserved = llm.kv_bytes(max_tokens) * slots
        self._stack = ExitStack()
        self.scheduler: BatchScheduler | None = None
        self._model = None
        self._serial: deque[BatchEntry] = deque()  # the fallback's queue
        self.entries: list[BatchEntry] = []

    def __enter__(self) -> BatchSession:
        what = f"KV cache of {self.llm.name}: {self.slots} x {self.max_tokens} tokens ({fmt_bytes(self.kv_reserved)})"
        self.memory.check_fits(what, self.kv_reserved, self.llm.handle)
        self.memory.reserve_working(self.kv_reserved, what)
        self._stack.callback(self.memory.release_working, what)
        try:
            self._model = self._stack.enter_context(self.memory.use(self.llm.handle))
            if self.llm.wrap is not None:
                self._model = self.llm.wrap(self._model)
            if getattr(self._model, "compact", False):
                self.scheduler = BatchScheduler(
                    self._model, slots=self.slots, max_tokens=self.max_tokens, device=self.memory.device
                )
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.scheduler = None
        self._model = None
        self._stack.close()

    @property
    def batched(self) -> bool:
        return self.scheduler is not None

    @property
    def busy(self) -> bool:
        return bool(self._serial) or (self.scheduler is not None and self.scheduler.busy)

    @property
    def active(self) -> int:
        return (
            len(self.scheduler.active) + len(self.scheduler.waiting) if self.scheduler else len(self._serial)
        )

    def prepare(self, request: GenerationRequest) -> tuple[list[int], int]:
        """(prompt ids, context size); raises ValueError as `generate_text` would."""
        ids = build_prompt_ids(
            self.llm.tokenizer, request.prompt, system_prompt=request.system_prompt, chat=request.chat
        )
        return ids, _context_size(self.llm, request, len(ids))

    def add(
        self,
        request: GenerationRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_done: Callable[[TextGeneration], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> BatchEntry | None:
        """Queue `request` (it joins at the next step); None when it needs more than a slot holds."""
        ids, context = self.prepare(request)
        if context > self.max_tokens:
            return None
        entry = BatchEntry(request, ids, context, TextStream(self.llm.tokenizer, request.stop_strings))
        entry.on_text, entry.on_done, entry.cancelled = on_text, on_done, cancelled
        self.entries.append(entry)
        if self.scheduler is None:
            self._serial.append(entry)
            return entry
        entry.sequence = self.scheduler.submit(
            SequenceRequest(
                ids,
                request.max_new_tokens,
                request.sampling,
                self.llm.eos_ids,
                request.seed,
                lambda token, index: self._on_token(entry, token),
            )
        )
        return entry

    def step(self) -> list[BatchEntry]:
        """One scheduler step (or, without the compact decoder, one whole request); the entries that ended."""
        if self.scheduler is None:
            if not self._serial:
                return []
            entry = self._serial.popleft()
            cache = KVCache(
                self.llm.config,
                entry.context,
                kind=entry.request.kv_cache,
                dtype=self.llm.dtype,
                model=self._model,
            )
            result = generate(
                self._model,
                entry.prompt_ids,
                cache,
                max_new_tokens=entry.request.max_new_tokens,
                params=entry.request.sampling,
                eos_ids=self.llm.eos_ids,
                seed=entry.request.seed,
                on_token=lambda token, index: self._on_token(entry, token),
                device=self.memory.device,
            )
            self._finish(entry, result)
            return [entry]
        ended = []
        for seq in self.scheduler.step():
            entry = next(e for e in self.entries if e.sequence is seq)
            assert seq.result is not None
            self._finish(entry, seq.result)
            ended.append(entry)
        return ended

    def run(self) -> None:
        while self.busy:
            self.step()

    def _on_token(self, entry: BatchEntry, token: int) -> bool:
        entry.tokens_seen += 1
        if token not in self.llm.eos_ids:
            delta = entry.stream.push(token)
            if delta and entry.on_text is not None:
                entry.on_text(delta)
        return entry.stream.stopped or (entry.cancelled is not None and entry.cancelled())

    def _finish(self, entry: BatchEntry, result: GenerationResult) -> None:
        tail = entry.stream.finish()
        if tail and entry.on_text is not None:
            entry.on_text(tail)
        per_sequence = self.kv_reserved // self.slots
        entry.done = TextGeneration(entry.stream.text, result, per_sequence, per_sequence)
        self.entries = [e for e in self.entries if e is not entry]
        if entry.on_done is not None:
            entry.on_done(entry.done)


def generate_texts(
    memory: MemoryManager,
    llm: LLMModel,
    requests: list[GenerationRequest],
    *,
    slots: int = DEFAULT_SLOTS,
    on_text: Callable[[int, str], None] | None = None,
    on_done: Callable[[int, TextGeneration], None] | None = None,
) -> list[TextGeneration]:
    """Every request decoded in one session, at most `slots` at a time; results in the requests' order."""
    if not requests:
        return []
    probe = BatchSession(memory, llm, slots=1, max_tokens=1)
    contexts = [probe.prepare(r)[1] for r in requests]  # every refusal before anything loads
    results: list[TextGeneration | None] = [None] * len(requests)
    with BatchSession(memory, llm, slots=min(slots, len(requests)), max_tokens=max(contexts)) as session:
        for i, request in enumerate(requests):

            def done(out: TextGeneration, i: int = i) -> None:
                results[i] = out
                if on_done is not None:
                    on_done(i, out)

            text = (lambda delta, i=i: on_text(i, delta)) if on_text is not None else None
            session.add(request, on_text=text, on_done=done)
        session.run()
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]
