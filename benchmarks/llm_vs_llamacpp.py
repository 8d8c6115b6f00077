"""SmolLM2's Q4_1 GGUF three ways: Nodeloom float32 (dequantized), Nodeloom packed int4/int8, llama.cpp.

Lives here: a script (`python benchmarks/llm_vs_llamacpp.py [--tokens 64] [--repeats 2] [--threads 2]`)
printing a Markdown table. Imports `memory`, `pipelines.llm`, `pipelines.paths`, torch, psutil; llama-cpp-python
only if installed (a benchmark-only optional dependency: its sdist compiles for >13 min on 2 cores, so it is
not a requirement; without it its column is skipped and the script says so).

Each run is its own process (so load time and memory are a cold process's), runs interleave (float32, packed,
llama.cpp, float32, ...) so a busy neighbour slows all engines alike, and the median counts. Per run:
- load: from the call that opens the model to its weights in memory (imports excluded; caches warm: a first
  untimed run of each engine converts/repacks);
- prefill tok/s: a 300-token prompt, first token included; decode tok/s: `--tokens` new tokens, eos ignored;
- memory: peak RSS above the process's RSS after imports.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMPT_TOKENS = 300
TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had, "
    "and watched the ships pass the reef while the lamp turned above him. "
)


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _child_nodeloom(mode: str, tokens: int, threads: int) -> dict[str, float]:
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
            ids = llm.tokenizer(TEXT * 20, add_special_tokens=False)["input_ids"][:PROMPT_TOKENS]
            cache = KVCache(llm.config, len(ids) + tokens, model=model)
            result = generate(model, ids, cache, max_new_tokens=tokens)  # no eos: exactly `tokens`
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {
        "load_s": load_s,
        "prefill_tok_s": result.prefill_tokens_per_s,
        "decode_tok_s": result.decode_tokens_per_s,
        "mem_mb": (peak - baseline) / 2**20,
    }


def _child_llamacpp(tokens: int, threads: int) -> dict[str, float]:
    from llama_cpp import Llama  # the optional dependency

    from pipelines.paths import resolve_model_path

    path = resolve_model_path("builtin:smollm2")
    baseline = _rss()
    started = time.perf_counter()
    llm = Llama(model_path=str(path), n_threads=threads, n_ctx=PROMPT_TOKENS + tokens + 8, verbose=False)
    load_s = time.perf_counter() - started
    ids = llm.tokenize(TEXT.encode() * 20, add_bos=False)[:PROMPT_TOKENS]
    started = time.perf_counter()
    llm.eval(ids)
    token = llm.sample(temp=0.0)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(tokens - 1):
        llm.eval([token])
        token = llm.sample(temp=0.0)
    decode_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "load_s": load_s,
        "prefill_tok_s": len(ids) / prefill_s,
        "decode_tok_s": (tokens - 1) / decode_s,
        "mem_mb": (peak - baseline) / 2**20,
    }


def _run_child(engine: str, tokens: int, threads: int) -> dict[str, float]:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}
    args = [sys.executable, __file__, "--child", engine, "--tokens", str(tokens), "--threads", str(threads)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{engine} run failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "llama.cpp":
            figures = _child_llamacpp(args.tokens, args.threads)
        else:
            figures = _child_nodeloom(args.child, args.tokens, args.threads)
        print(json.dumps(figures))
        return

    engines = ["float32", "packed"]
    if importlib.util.find_spec("llama_cpp") is not None:
        engines.append("llama.cpp")
    else:
        print(
            "llama-cpp-python is not installed: its column is skipped (pip install llama-cpp-python to add it)"
        )
    for engine in engines:  # warm the caches: conversion / repacking is not what the load figure measures
        _run_child(engine, 2, args.threads)
    runs: dict[str, list[dict[str, float]]] = {e: [] for e in engines}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeats):
        for engine in engines:
            runs[engine].append(_run_child(engine, args.tokens, args.threads))
    load_after = os.getloadavg()[0]
    print(
        f"\n{args.threads} threads, {args.tokens} new tokens, {PROMPT_TOKENS}-token prompt, median of {args.repeats};"
        f" load average {load_before:.2f} before, {load_after:.2f} after\n"
    )
    print("| engine | load (s) | decode tok/s | prefill tok/s | memory above baseline (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for engine, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"| {engine} | {med['load_s']:.2f} | {med['decode_tok_s']:.1f} | {med['prefill_tok_s']:.0f} | {med['mem_mb']:.0f} |"
        )
    base = {k: statistics.median(r[k] for r in runs["float32"]) for k in runs["float32"][0]}
    packed = {k: statistics.median(r[k] for r in runs["packed"]) for k in runs["packed"][0]}
    print(
        f"\npacked / float32: decode {packed['decode_tok_s'] / base['decode_tok_s']:.2f}x, prefill "
        f"{packed['prefill_tok_s'] / base['prefill_tok_s']:.2f}x, load {packed['load_s'] / base['load_s']:.2f}x, "
        f"memory {packed['mem_mb'] / base['mem_mb']:.2f}x"
    )


if __name__ == "__main__":
    main()
