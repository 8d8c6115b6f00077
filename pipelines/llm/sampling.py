"""Turn next-token logits into a token: repetition penalty, temperature, top-k, top-p, min-p, then a draw.

Lives here: `SamplingParams`, `apply_repetition_penalty`, `logits_to_probs`, `sample`.
Imports torch only. Same order and semantics as transformers' logits processors, so temperature 0
(greedy) is an argmax, exactly what `model.generate(do_sample=False)` picks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy (argmax)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0 = off; drop tokens less likely than min_p x the best one's probability
    repetition_penalty: float = 1.0  # 1.0 = off; >1 discourages tokens already in prompt or output

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def check(self) -> None:
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL-style penalty (https://arxiv.org/abs/1909.05858): shrink the logits of `seen` ids.

    logits: (B, V); seen: (B, S) ids. A positive logit is divided by `penalty`, a negative one multiplied.
    """
    score = torch.gather(logits, 1, seen)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(1, seen, score)


def logits_to_probs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> torch.Tensor:
    """(B, V) logits -> (B, V) probabilities after temperature, top-k, nucleus and min-p filtering (the order
    of transformers' warpers; ComfyUI's TextGenerate passes min_p to the same step)."""
    logits = logits / max(temperature, 1e-5)
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop tokens once the mass before them already reaches top_p; always keep the best one
        drop = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop[:, 0] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), -float("inf"))
    if min_p > 0.0:
        # transformers' MinPLogitsWarper: relative to the best token, so the best one always stays
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), -float("inf"))
    return torch.softmax(logits, dim=-1)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    seen: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(B, V) logits of the last position -> (B, 1) next token ids."""
    logits = logits.float()
    if params.repetition_penalty != 1.0 and seen is not None:
        logits = apply_repetition_penalty(logits, seen, params.repetition_penalty)
    if params.greedy:
        return torch.argmax(logits, dim=-1, keepdim=True)
    probs = logits_to_probs(logits, params.temperature, params.top_k, params.top_p, params.min_p)
    # Gumbel-style draw without a host sync (gpt-fast): argmax(p / q), q ~ Exp(1)
    q = torch.empty_like(probs).exponential_(1, generator=generator)
    return torch.argmax(probs / q, dim=-1, keepdim=True)
