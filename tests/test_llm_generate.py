"""Our prefill/decode loop on a tiny random Llama: parity with `model.generate`, sampling, KV cache."""

from __future__ import annotations

import pytest
import torch
from transformers import TopKLogitsWarper, TopPLogitsWarper

from memory import kv_cache_bytes
from pipelines.llm.chat import parse_stop_strings
from pipelines.llm.detokenize import StopStringFilter
from pipelines.llm.generate import generate
from pipelines.llm.kv_cache import KVCache
from pipelines.llm.sampling import SamplingParams, logits_to_probs, sample
from tests.llm_fixtures import tiny_llama

PROMPTS = [[1, 50, 60, 70], [5], [1, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 3, 4, 9]]


def _reference(model, prompt: list[int], n: int, **kwargs) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **kwargs,
        )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_greedy_matches_model_generate_token_for_token(kind: str) -> None:
    model = tiny_llama(seed=1)
    for prompt in PROMPTS:
        want = _reference(model, prompt, 40)
        got = generate(model, prompt, KVCache(model.config, len(prompt) + 40, kind=kind), max_new_tokens=40)
        assert got.tokens == want
        assert got.stop_reason == "max_new_tokens" and got.prompt_tokens == len(prompt)
        assert len(got.step_s) == 39 and got.ttft_s > 0 and got.decode_tokens_per_s > 0


def test_repetition_penalty_matches_model_generate() -> None:
    model = tiny_llama(seed=2)
    prompt = PROMPTS[0]
    want = _reference(model, prompt, 30, repetition_penalty=1.5)
    got = generate(
        model,
        prompt,
        KVCache(model.config, 64),
        max_new_tokens=30,
        params=SamplingParams(repetition_penalty=1.5),
    )
    assert got.tokens == want
    assert got.tokens != _reference(model, prompt, 30)  # the penalty did change something


def test_eos_stops_and_is_kept_like_generate() -> None:
    model = tiny_llama(seed=1)
    prompt = PROMPTS[0]
    free = _reference(model, prompt, 20)
    eos = free[5]
    first = free.index(eos)
    got = generate(model, prompt, KVCache(model.config, 64), max_new_tokens=20, eos_ids=(eos,))
    assert got.tokens == free[: first + 1] and got.stop_reason == "eos"


def test_on_token_can_stop_early() -> None:
    model = tiny_llama(seed=1)
    seen: list[tuple[int, int]] = []

    def on_token(token: int, index: int) -> bool:
        seen.append((token, index))
        return index == 4

    got = generate(model, PROMPTS[0], KVCache(model.config, 64), max_new_tokens=20, on_token=on_token)
    assert len(got.tokens) == 5 and got.stop_reason == "stopped"
    assert [i for _, i in seen] == [0, 1, 2, 3, 4] and [t for t, _ in seen] == got.tokens


def test_sampling_is_seeded_and_top_k_1_is_greedy() -> None:
    model = tiny_llama(seed=3)
    prompt = PROMPTS[0]
    params = SamplingParams(temperature=1.5, top_p=0.95)
    a = generate(model, prompt, KVCache(model.config, 64), max_new_tokens=30, params=params, seed=7).tokens
    b = generate(model, prompt, KVCache(model.config, 64), max_new_tokens=30, params=params, seed=7).tokens
    c = generate(model, prompt, KVCache(model.config, 64), max_new_tokens=30, params=params, seed=8).tokens
    assert a == b and a != c
    greedy = generate(model, prompt, KVCache(model.config, 64), max_new_tokens=30).tokens
    top1 = generate(
        model,
        prompt,
        KVCache(model.config, 64),
        max_new_tokens=30,
        params=SamplingParams(temperature=1.0, top_k=1),
        seed=5,
    ).tokens
    assert top1 == greedy


def test_top_k_and_top_p_filter_like_transformers() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 100) * 3
    for k in (1, 5, 50):
        ours = logits_to_probs(logits, 1.0, top_k=k) > 0
        ref = torch.isfinite(TopKLogitsWarper(k)(None, logits.clone()))
        assert torch.equal(ours, ref)
    for p in (0.1, 0.5, 0.9):
        ours = logits_to_probs(logits, 1.0, top_p=p) > 0
        ref = torch.isfinite(TopPLogitsWarper(p)(None, logits.clone()))
        assert torch.equal(ours, ref), p


def test_min_p_filters_like_transformers_after_top_p() -> None:
    # ComfyUI's TextGenerate samples with min_p 0.05 in its templates (the LTX-2.3 and Krea 2 prompt writers).
    from transformers.generation.logits_process import MinPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(3, 100) * 3
    for m in (0.01, 0.05, 0.3, 1.0):
        ours = logits_to_probs(logits, 1.0, min_p=m) > 0
        ref = torch.isfinite(MinPLogitsWarper(m)(None, logits.clone()))
        assert torch.equal(ours, ref), m
    both = logits_to_probs(logits, 1.0, top_p=0.9, min_p=0.05) > 0
    ref = torch.isfinite(MinPLogitsWarper(0.05)(None, TopPLogitsWarper(0.9)(None, logits.clone())))
    assert torch.equal(both, ref)
    with pytest.raises(ValueError, match="min_p"):
        SamplingParams(temperature=1.0, min_p=1.5).check()


def test_sample_draws_follow_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    g = torch.Generator().manual_seed(0)
    draws = [int(sample(logits, SamplingParams(temperature=1.0), generator=g)) for _ in range(3000)]
    freq = [draws.count(i) / len(draws) for i in range(3)]
    assert abs(freq[0] - 0.7) < 0.04 and abs(freq[1] - 0.2) < 0.04 and abs(freq[2] - 0.1) < 0.03


def test_kv_cache_bytes_match_the_formula_and_the_tensors() -> None:
    model = tiny_llama()
    cfg = model.config
    expected = kv_cache_bytes(
        cfg.num_hidden_layers, 1, 50, cfg.num_key_value_heads, cfg.head_dim, torch.float32
    )
    static = KVCache(cfg, 50, kind="static")
    dynamic = KVCache(cfg, 50)
    assert static.reserved_bytes == dynamic.reserved_bytes == expected
    prompt = PROMPTS[2]
    generate(model, prompt, static, max_new_tokens=10)
    generate(model, prompt, dynamic, max_new_tokens=10)
    assert static.nbytes == expected  # allocated up front
    used = len(prompt) + 10 - 1  # the last sampled token is never fed back
    assert dynamic.seq_len == used
    assert dynamic.nbytes == kv_cache_bytes(
        cfg.num_hidden_layers, 1, used, cfg.num_key_value_heads, cfg.head_dim, torch.float32
    )


def test_context_too_small_is_refused() -> None:
    model = tiny_llama()
    with pytest.raises(ValueError, match="do not fit"):
        generate(model, PROMPTS[2], KVCache(model.config, 16), max_new_tokens=10)


def test_stop_strings_are_held_back_and_cut() -> None:
    f = StopStringFilter(["\n\n", "END"])
    out = "".join(f.feed(d) for d in ["Hello", " wor", "ld E", "N", "D more"])
    assert out == "Hello world " and f.stopped
    f = StopStringFilter(["END"])
    out = "".join(f.feed(d) for d in ["an E", "nd", " EN"]) + f.flush()
    assert out == "an End EN" and not f.stopped  # a partial match that never completes comes out at the end
    f = StopStringFilter(["\n"])
    assert f.feed("line one\nline two") == "line one" and f.stopped
    assert parse_stop_strings("a|b\\n|") == ("a", "b\n")
    assert parse_stop_strings("x\ny") == ("x", "y")
