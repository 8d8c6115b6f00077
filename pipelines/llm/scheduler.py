"""Continuous batching: sequences join and leave a shared batch between decode steps.

Lives here: `SequenceRequest`, `Sequence`, `BatchScheduler`. Imports torch and
`pipelines.llm.{batch_kv,compact_model,generate,sampling}`.

`submit` queues a sequence; each `step` first admits waiting sequences into free slots (each prefilled on
its own, which gives its first token and its time to first token), then decodes one token for every active
sequence in one batched forward (`batch_decode_step`). A sequence leaves as soon as it stops (eos, its
`max_new_tokens`, or its `on_token` saying stop: a stop string, a cancel), and its slot is free for the next
one at the following step. Positions, sampling settings, random generators and stop conditions are per
sequence; the one host sync per step is reading the B new tokens back.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from pipelines.llm.batch_kv import BatchKV, batch_decode_step
from pipelines.llm.compact_model import CompactLM
from pipelines.llm.generate import GenerationResult, OnToken
from pipelines.llm.sampling import SamplingParams, sample


@dataclass
class SequenceRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    params: SamplingParams = field(default_factory=SamplingParams)
    eos_ids: tuple[int, ...] = ()
    seed: int | None = None
    on_token: OnToken | None = None  # (token id, 0-based index) -> True to stop this sequence


@dataclass
class Sequence:
    """One sequence's state in the batch; `result` is set once it has left."""

    request: SequenceRequest
    slot: int = -1
    tokens: list[int] = field(default_factory=list)
    position: int = 0  # the cache position the next fed token goes to
    generator: torch.Generator | None = None
    seen: torch.Tensor | None = None  # prompt + output ids, only for a repetition penalty
    submitted_at: float = 0.0
    admitted_at: float = 0.0
    first_at: float = 0.0
    step_s: list[float] = field(default_factory=list)
    result: GenerationResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None


class BatchScheduler:
    """Up to `slots` sequences of at most `max_tokens` positions each, decoded together."""

    def __init__(
        self, model: CompactLM, *, slots: int, max_tokens: int, device: torch.device | None = None
    ) -> None:
        if not getattr(model, "compact", False):
            raise TypeError("batched decoding needs the compact decoder (packed weights)")
        if slots < 1:
            raise ValueError(f"a batch needs at least one slot, got {slots}")
        self.model = model
        self.device = device or model.device
        self.kv = BatchKV(model.config, slots, max_tokens, model.dtype, self.device)
        self.waiting: deque[Sequence] = deque()
        self.active: list[Sequence] = []
        self.steps = 0  # batched decode steps run

    @property
    def max_tokens(self) -> int:
        return self.kv.max_tokens

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.active)

    def fits(self, request: SequenceRequest) -> bool:
        return len(request.prompt_ids) + request.max_new_tokens - 1 <= self.kv.max_tokens

    def submit(self, request: SequenceRequest) -> Sequence:
        """Queue a sequence; it joins the batch at the next `step` with a free slot."""
        request.params.check()
        if request.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {request.max_new_tokens}")
        if not request.prompt_ids:
            raise ValueError("the prompt has no tokens")
        if not self.fits(request):
            raise ValueError(
                f"prompt ({len(request.prompt_ids)} tokens) + {request.max_new_tokens} new tokens do not fit "
                f"a batch slot of {self.kv.max_tokens} tokens"
            )
        seq = Sequence(request, submitted_at=time.perf_counter())
        if not request.params.greedy:
            seq.generator = torch.Generator(device=self.device)
            seq.generator.manual_seed(request.seed if request.seed is not None else torch.seed())
        self.waiting.append(seq)
        return seq

    def step(self) -> list[Sequence]:
        """Admit what fits, then one decode step for every active sequence; returns those that left."""
        left = self._admit()
        if self.active:
            left += self._decode()
        return left

    def run(self) -> None:
        while self.busy:
            self.step()

    # -- the two halves of a step ------------------------------------------------------------------------

    def _free_slot(self) -> int | None:
        taken = {s.slot for s in self.active}
        return next((i for i in range(self.kv.slots) if i not in taken), None)

    @torch.inference_mode()
    def _admit(self) -> list[Sequence]:
        left: list[Sequence] = []
        while self.waiting and (slot := self._free_slot()) is not None:
            seq = self.waiting.popleft()
            seq.slot, seq.admitted_at = slot, time.perf_counter()
            req = seq.request
            prompt = torch.tensor([req.prompt_ids], dtype=torch.long, device=self.device)  # (1, S)
            logits = self.model.step(prompt, self.kv.slot_view(slot))  # the single run's prefill
            if req.params.repetition_penalty != 1.0:
                seq.seen = prompt
            first = int(self._sample(seq, logits)[0].item())
            seq.first_at = time.perf_counter()
            seq.position = len(req.prompt_ids)
            if self._push(seq, first):
                left.append(seq)
            else:
                self.active.append(seq)
        return left

    @torch.inference_mode()
    def _decode(self) -> list[Sequence]:
        started = time.perf_counter()
        batch = sorted(self.active, key=lambda s: s.slot)
        tokens = torch.tensor([[s.tokens[-1]] for s in batch], dtype=torch.long, device=self.device)
        if len(batch) == 1:  # alone: exactly the single run's step (no mask, no padding)
            view = self.kv.slot_view(batch[0].slot)
            view.filled = batch[0].position
            logits = self.model.step(tokens, view)
        else:
            slots, positions = [s.slot for s in batch], [s.position for s in batch]
            logits = batch_decode_step(self.model, tokens, self.kv, slots, positions)
        if all(s.request.params.greedy and s.seen is None for s in batch):
            chosen = torch.argmax(logits.float(), dim=-1).tolist()  # one sync for the whole batch
        else:
            chosen = [int(self._sample(s, logits[i : i + 1])[0].item()) for i, s in enumerate(batch)]
        elapsed = time.perf_counter() - started
        self.steps += 1
        left = []
        for seq, token in zip(batch, chosen, strict=True):
            seq.step_s.append(elapsed)
            seq.position += 1
            if self._push(seq, token):
                left.append(seq)
        self.active = [s for s in self.active if not s.done]
        return left

    def _sample(self, seq: Sequence, logits: torch.Tensor) -> torch.Tensor:
        token = sample(logits, seq.request.params, seen=seq.seen, generator=seq.generator)  # (1, 1)
        if seq.seen is not None:
            seq.seen = torch.cat([seq.seen, token], dim=1)
        return token[0]

    def _push(self, seq: Sequence, token: int) -> bool:
        """Record `token`; True (and the result set) when the sequence stops with it."""
        seq.tokens.append(token)
        req = seq.request
        reason = None
        if token in req.eos_ids:
            reason = "eos"
        elif req.on_token is not None and req.on_token(token, len(seq.tokens) - 1):
            reason = "stopped"
        elif len(seq.tokens) >= req.max_new_tokens:
            reason = "max_new_tokens"
        if reason is None:
            return False
        now = time.perf_counter()
        seq.result = GenerationResult(
            seq.tokens,
            len(req.prompt_ids),
            prefill_s=seq.first_at - seq.admitted_at,
            decode_s=now - seq.first_at,
            stop_reason=reason,
            step_s=seq.step_s,
        )
        return True
