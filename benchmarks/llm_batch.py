"""Batched decoding vs single runs: 8 greedy prompts decoded together vs the same 8 one after another.

Lives here: a script (`python benchmarks/llm_batch.py [--tokens 48] [--repeats 2]`) printing what each
prompt gave both ways and the throughput ratio. Imports `memory`, `pipelines.llm`, torch.

SmolLM2-135M Q4_1 (the built-in GGUF) with packed weights (the compact decoder; the batch needs it), greedy,
eos disabled so every sequence makes exactly `--tokens` new tokens. A round is one batch run (the scheduler
with 8 slots: 8 prefills, then batched decode steps) and one pass of 8 single runs (`generate` with its own
static cache each); rounds alternate and the median counts. Tokens/s is all new tokens over the whole wall
time, prefill included, both ways. Goal: batch >= 3x the single runs; at least 7 of 8 texts identical.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `app` sets it (FINDINGS: spin-waits on 2 cores)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory import MemoryConfig, MemoryManager  # noqa: E402
from pipelines.llm.chat import build_prompt_ids  # noqa: E402
from pipelines.llm.generate import generate  # noqa: E402
from pipelines.llm.kv_cache import KVCache  # noqa: E402
from pipelines.llm.runtime import open_llm  # noqa: E402
from pipelines.llm.scheduler import BatchScheduler, SequenceRequest  # noqa: E402
from pipelines.paths import resolve_model_path  # noqa: E402

PROMPTS = (
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What is two plus two?",
    "Give me a tip for learning to cook.",
    "Why is the sky blue?",
    "Describe a cat in a few words.",
    "What do bees make?",
)


def single_runs(
    model: torch.nn.Module, config: object, prompts: list[list[int]], tokens: int
) -> list[list[int]]:
    out = []
    for ids in prompts:
        cache = KVCache(config, len(ids) + tokens, kind="static", model=model)  # type: ignore[arg-type]
        out.append(generate(model, ids, cache, max_new_tokens=tokens).tokens)
    return out


def batch_run(model: torch.nn.Module, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    scheduler = BatchScheduler(model, slots=len(prompts), max_tokens=max(map(len, prompts)) + tokens)  # type: ignore[arg-type]
    seqs = [scheduler.submit(SequenceRequest(ids, tokens)) for ids in prompts]
    scheduler.run()
    return [s.tokens for s in seqs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per prompt (default 48)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds, alternating (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path("builtin:smollm2")
    with (
        tempfile.TemporaryDirectory() as tmp,
        MemoryManager(MemoryConfig(device="cpu", data_dir=Path(tmp))) as memory,
    ):
        llm = open_llm(memory, path, keep_quantized="on")
        prompts = [build_prompt_ids(llm.tokenizer, p) for p in PROMPTS]
        with memory.use(llm.handle) as model:
            if not getattr(model, "compact", False):
                print("the packed decoder is not available here: nothing to compare", file=sys.stderr)
                return 1
            batch_run(model, prompts[:2], 4)  # warm both paths (first-call allocations)
            single_runs(model, llm.config, prompts[:1], 4)
            batch_s, single_s, batch_cpu, single_cpu = [], [], [], []
            load_before = os.getloadavg()[0]
            for _ in range(args.repeats):
                started, cpu = time.perf_counter(), time.process_time()
                batched = batch_run(model, prompts, args.tokens)
                batch_s.append(time.perf_counter() - started)
                batch_cpu.append(time.process_time() - cpu)
                started, cpu = time.perf_counter(), time.process_time()
                singles = single_runs(model, llm.config, prompts, args.tokens)
                single_s.append(time.perf_counter() - started)
                single_cpu.append(time.process_time() - cpu)
            load_after = os.getloadavg()[0]
    total = len(prompts) * args.tokens
    b_rate, s_rate = total / statistics.median(batch_s), total / statistics.median(single_s)
    same = sum(b == s for b, s in zip(batched, singles, strict=True))
    print("| prompt | identical | batch text | single text |\n|---|---|---|---|")
    for prompt, b, s in zip(PROMPTS, batched, singles, strict=True):
        first = next((i for i, (x, y) in enumerate(zip(b, s, strict=False)) if x != y), None)
        mark = "yes" if first is None else f"no (from token {first})"
        show = [repr(llm.tokenizer.decode(t, skip_special_tokens=True))[:60] for t in (b, s)]
        print(f"| {prompt} | {mark} | {show[0]} | {show[1]} |")
    print(
        f"\nSmolLM2 Q4_1 packed, {args.threads} threads, {len(prompts)} prompts x {args.tokens} tokens, greedy"
    )
    print(f"8 single runs: {s_rate:.1f} tok/s (median {statistics.median(single_s):.2f} s)")
    print(f"one batch of 8: {b_rate:.1f} tok/s (median {statistics.median(batch_s):.2f} s)")
    print(
        f"ratio batch / single: {b_rate / s_rate:.2f}x (goal >= 3x); identical texts: {same} of {len(prompts)}"
    )
    b_cpu, s_cpu = statistics.median(batch_cpu), statistics.median(single_cpu)
    print(
        f"CPU time: batch {b_cpu:.2f} s, single runs {s_cpu:.2f} s, ratio {s_cpu / b_cpu:.2f}x "
        f"(load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
