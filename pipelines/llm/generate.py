"""Our own generation loop over a transformers causal LM, written out as small functions (gpt-fast).

Lives here: `prefill`, `decode_one_token`, `decode_n_tokens`, `generate`, `GenerationResult`.
Imports torch and `pipelines.llm.{kv_cache,sampling}`.

Prefill runs the whole prompt once and samples the first token (its wall time is the time to first
token); each decode step feeds one token at the next cache position. Keeping them apart is what lets
every step be timed and reported, and streamed out through `on_token`, and stopped early.
Greedy output is token-for-token what `model.generate(do_sample=False)` returns: same model calls,
same (dynamic) cache, same argmax. A compact decoder (`compact_model.CompactLM`, packed GGUF weights) is
called through its `step` with its own static cache. The one host sync per token is `token.item()`, the
stop check (eos, stop strings, cancel) and the streamed text need it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from pipelines.llm.kv_cache import KVCache
from pipelines.llm.sampling import SamplingParams, sample

# on_token(token_id, index) -> True to stop now (stop string found, cancel...). index is 0-based.
OnToken = Callable[[int, int], bool]


@dataclass
class GenerationResult:
    tokens: list[int]  # new tokens, without the prompt; includes the eos token if one was sampled
    prompt_tokens: int
    prefill_s: float  # time to first token: prompt forward + first sample
    decode_s: float  # every later token
    stop_reason: str  # "eos" | "max_new_tokens" | "stopped"
    step_s: list[float] = field(default_factory=list)  # wall time of each decode step

    @property
    def ttft_s(self) -> float:
        return self.prefill_s

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second after the first one (the first comes from prefill)."""
        n = len(self.tokens) - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0


def _forward(
    model: torch.nn.Module, ids: torch.Tensor, cache: KVCache, positions: torch.Tensor
) -> torch.Tensor:
    """Logits of the last position, (B, V). ids: (B, S); positions: (S,) the cache slots they fill."""
    if getattr(model, "compact", False):  # our decoder: its cache knows the next position itself
        return model.step(ids, cache.cache)
    out = model(
        input_ids=ids,
        cache=cache.cache,
        position_ids=positions.unsqueeze(0),
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1, :]


def prefill(
    model: torch.nn.Module,
    ids: torch.Tensor,
    cache: KVCache,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """ids: (1, S) prompt -> (1, 1) first new token."""
    positions = torch.arange(ids.shape[1], device=ids.device)
    logits = _forward(model, ids, cache, positions)
    return sample(logits, params, seen=ids, generator=generator)


def decode_one_token(
    model: torch.nn.Module,
    token: torch.Tensor,
    position: int,
    cache: KVCache,
    params: SamplingParams,
    seen: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """token: (1, 1) at cache slot `position` -> (1, 1) next token."""
    positions = token.new_full((1,), position)
    logits = _forward(model, token, cache, positions)
    return sample(logits, params, seen=seen, generator=generator)


def decode_n_tokens(
    model: torch.nn.Module,
    first: torch.Tensor,
    prompt: torch.Tensor,
    cache: KVCache,
    n: int,
    params: SamplingParams,
    *,
    eos_ids: tuple[int, ...] = (),
    on_token: OnToken | None = None,
    generator: torch.Generator | None = None,
) -> tuple[list[int], str, list[float]]:
    """Feed `first` and keep decoding until eos, `on_token` says stop, or `n` tokens in all.

    Returns (all new token ids including `first`, stop reason, seconds of each decode step).
    """
    token = first
    tokens = [int(first.item())]
    seen = torch.cat([prompt, first], dim=1) if params.repetition_penalty != 1.0 else prompt
    step_s: list[float] = []
    if tokens[0] in eos_ids:
        return tokens, "eos", step_s
    if on_token is not None and on_token(tokens[0], 0):
        return tokens, "stopped", step_s
    position = prompt.shape[1]
    while len(tokens) < n:
        started = time.perf_counter()
        token = decode_one_token(model, token, position, cache, params, seen, generator)
        token_id = int(token.item())
        step_s.append(time.perf_counter() - started)
        tokens.append(token_id)
        position += 1
        if params.repetition_penalty != 1.0:
            seen = torch.cat([seen, token], dim=1)
        if token_id in eos_ids:
            return tokens, "eos", step_s
        if on_token is not None and on_token(token_id, len(tokens) - 1):
            return tokens, "stopped", step_s
    return tokens, "max_new_tokens", step_s


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    prompt_ids: list[int],
    cache: KVCache,
    *,
    max_new_tokens: int,
    params: SamplingParams | None = None,
    eos_ids: tuple[int, ...] = (),
    seed: int | None = None,
    on_token: OnToken | None = None,
    device: torch.device | None = None,
) -> GenerationResult:
    """Prefill `prompt_ids`, then decode up to `max_new_tokens` new tokens (the first from prefill).

    `device`: where the inputs go (the memory manager's execution device); default: the first weight's.
    """
    params = params or SamplingParams()
    params.check()
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if len(prompt_ids) + max_new_tokens - 1 > cache.max_tokens:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + {max_new_tokens} new tokens do not fit a KV cache "
            f"of {cache.max_tokens} tokens"
        )
    device = device or next(model.parameters()).device
    generator = None
    if not params.greedy:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed if seed is not None else torch.seed())
    prompt = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # (1, S)

    started = time.perf_counter()
    first = prefill(model, prompt, cache, params, generator)
    first.item()  # the first token exists on the host: that is the time to first token
    prefill_s = time.perf_counter() - started

    started = time.perf_counter()
    tokens, reason, step_s = decode_n_tokens(
        model,
        first,
        prompt,
        cache,
        max_new_tokens,
        params,
        eos_ids=eos_ids,
        on_token=on_token,
        generator=generator,
    )
    decode_s = time.perf_counter() - started
    return GenerationResult(tokens, len(prompt_ids), prefill_s, decode_s, reason, step_s)
