"""GGUF LLMs kept quantized: bytes in the ledger are the file's blocks, greedy text matches the float32 copy.

Tiny random Llama/Qwen2 models exported as llama.cpp would (tests/llm_fixtures.py), one per quant type. The
float32 path is the cached conversion of the same file, so the two differ only by where dequantization
happens (once at conversion, or per layer at every call) and its arithmetic order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from memory import BudgetExceeded, MemoryConfig, MemoryManager
from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
from pipelines.llm.sampling import SamplingParams
from tests.llm_fixtures import tiny_llama, tiny_qwen2, write_tiny_gguf

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

GREEDY = GenerationRequest(
    prompt="hello there", chat=False, max_new_tokens=64, sampling=SamplingParams(), seed=0
)


def agreement(a: list[int], b: list[int], n: int = 64) -> float:
    """Share of the first `n` positions where both runs agree; after an end-of-turn a run has no token, and
    two runs that both ended there agree."""
    pad_a, pad_b = a + [-1] * (n - len(a)), b + [-1] * (n - len(b))
    return sum(x == y for x, y in zip(pad_a[:n], pad_b[:n], strict=True)) / n


def file_bytes(path: Path) -> int:
    """Quantized tensors at their block bytes in the file, F32 ones at 4 bytes per value."""
    return sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors)


@pytest.mark.parametrize(
    ("arch", "qtype"), [("llama", Q.Q8_0), ("llama", Q.Q4_0), ("llama", Q.Q4_1), ("qwen2", Q.Q5_0)]
)
def test_kept_quantized_greedy_matches_float32(tmp_path: Path, arch: str, qtype: Q) -> None:
    from pipelines.llm.chat import build_prompt_ids

    model = tiny_llama() if arch == "llama" else tiny_qwen2()
    path = tmp_path / f"tiny-{arch}-{qtype.name}.gguf"
    write_tiny_gguf(model, path, qtype)
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm, torch.no_grad():
        full, quantized = open_llm(mm, path), open_llm(mm, path, keep_quantized="blocks")
        tokens = {llm: generate_text(mm, llm, GREEDY).result.tokens for llm in (full, quantized)}
        # Teacher-forced too: both read the float32 run's text, so one early near-tie doesn't decide the rest
        # (random tiny models have many; SmolLM2's free-running figure is in benchmarks/precision.py).
        prompt = build_prompt_ids(full.tokenizer, GREEDY.prompt, chat=False)
        ids = torch.tensor([prompt + tokens[full]])
        picks = {}
        for llm in (full, quantized):
            with mm.use(llm.handle) as module:
                picks[llm] = module(ids).logits[0, len(prompt) - 1 : -1].argmax(-1).tolist()
        assert picks[full] == tokens[full]  # the teacher-forced float32 picks are its own greedy run
        free = agreement(tokens[quantized], tokens[full])
        forced = agreement(picks[quantized], picks[full])
        assert quantized.handle.spec.storage == "gguf"
        assert quantized.handle.weight_bytes == file_bytes(path)
        ratio = quantized.handle.weight_bytes / full.handle.weight_bytes
    print(
        f"{arch} {qtype.name}: greedy agreement {free:.0%} free-running, {forced:.0%} teacher-forced on 64 tokens; weights {ratio:.2f}x float32"
    )
    assert forced >= 0.9
    assert ratio < 0.45


def test_kv_budget_counts_the_quantized_bytes(tmp_path: Path) -> None:
    model = tiny_llama()
    path = tmp_path / "tiny-Q4_0.gguf"
    write_tiny_gguf(model, path, Q.Q4_0)
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as probe:
        full = open_llm(probe, path).handle.weight_bytes
        small = open_llm(probe, path, keep_quantized=True).handle.weight_bytes
    kv = 2 * 2 * 256 * 2 * 16 * 4  # 2 (k, v) x layers x 256 tokens x kv heads x head dim x float32
    budget = small + kv + (full - small) // 2  # room for the quantized weights + KV, not the float32 ones
    request = GenerationRequest(prompt="hi", chat=False, max_new_tokens=8, context_tokens=256)
    with MemoryManager(MemoryConfig(device="cpu", policy="none", ram_budget=f"{budget}B")) as mm:
        out = generate_text(mm, open_llm(mm, path, keep_quantized="blocks"), request)
        assert out.kv_reserved_bytes == kv
        with pytest.raises(BudgetExceeded, match="KV cache"):
            generate_text(mm, open_llm(mm, path), request)
