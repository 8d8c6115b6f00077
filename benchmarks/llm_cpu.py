"""LLM on CPU: our prefill/decode loop vs `model.generate`, and GGUF load cold vs cached.

Lives here: a script (`python benchmarks/llm_cpu.py`) printing a Markdown table. Imports `pipelines.llm`,
`pipelines.paths`, transformers, torch. Both comparisons run side by side in one process:

- throughput: greedy decoding of the same prompt on SmolLM2-135M (float32), eos disabled so both make
  exactly `--tokens` new tokens; runs alternate (ours, generate, ours, ...) and the median counts.
  Tokens/s is new tokens over the whole call (prefill included) for both; goal: ours >= 0.95x.
- load: the GGUF from an empty cache (dequantize, write safetensors + config + tokenizer, build the
  model) vs the next load from the cache; both end by touching every weight page, so the
  memory-mapped weights are really in RAM.
  Goal: cached <= 0.15x cold. `--with-transformers-gguf` adds `from_pretrained(gguf_file=...)` (~30 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.llm.chat import build_prompt_ids  # noqa: E402
from pipelines.llm.generate import generate  # noqa: E402
from pipelines.llm.gguf_cache import ensure_gguf_converted  # noqa: E402
from pipelines.llm.hf_loader import LLMFiles, build_causal_lm, load_tokenizer  # noqa: E402
from pipelines.llm.kv_cache import KVCache  # noqa: E402
from pipelines.paths import resolve_model_path  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def _touch_weights(model: torch.nn.Module) -> None:
    """Read one float per 4 KiB page of every weight: the memory-mapped file is really in RAM after."""
    with torch.inference_mode():
        for param in model.parameters():
            param.detach().reshape(-1)[::1024].sum()


def _warm_forward(model: torch.nn.Module) -> None:
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2, 3]]))


def time_load(gguf: Path, cache_root: Path) -> tuple[float, float]:
    """(cold seconds, cached seconds): convert + build + tokenizer + page in every weight, then again
    from the cache. (A forward pass here would time 2-thread compute, not loading.)"""
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        folder = ensure_gguf_converted(gguf, cache_root=cache_root)
        files = LLMFiles(gguf, folder, (folder / "model.safetensors",), from_gguf=True)
        model = build_causal_lm(files)
        load_tokenizer(files)
        _touch_weights(model)
        timings.append(time.perf_counter() - started)
        del model
    return timings[0], timings[1]


def time_transformers_gguf(gguf: Path) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _touch_weights(model)
    return time.perf_counter() - started


def time_decoding(model: torch.nn.Module, ids: list[int], tokens: int, repeats: int) -> dict[str, float]:
    model.generation_config.eos_token_id = None  # both loops make exactly `tokens` tokens
    ours_rate, ref_rate, ttft, decode_rate = [], [], [], []
    same = True
    prompt = torch.tensor([ids])
    for _ in range(repeats):
        started = time.perf_counter()
        result = generate(model, ids, KVCache(model.config, len(ids) + tokens), max_new_tokens=tokens)
        ours_rate.append(tokens / (time.perf_counter() - started))
        ttft.append(result.ttft_s)
        decode_rate.append(result.decode_tokens_per_s)
        started = time.perf_counter()
        with torch.inference_mode():
            # An explicit mask: without one, generate guesses padding from pad_token_id, which is
            # <|im_end|> here and appears in the chat prompt, and masks those prompt tokens out.
            ref = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=tokens,
                do_sample=False,
                pad_token_id=2,
            )
        ref_rate.append(tokens / (time.perf_counter() - started))
        same = same and ref[0, len(ids) :].tolist() == result.tokens
    return {
        "ours": statistics.median(ours_rate),
        "generate": statistics.median(ref_rate),
        "ttft": statistics.median(ttft),
        "decode": statistics.median(decode_rate),
        "same": float(same),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:smollm2", help="a GGUF file or builtin:smollm2")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--with-transformers-gguf", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gguf = resolve_model_path(args.model)

    with tempfile.TemporaryDirectory(prefix="nodeloom-bench-") as tmp:
        cold, cached = time_load(gguf, Path(tmp) / "gguf-cache")
        folder = ensure_gguf_converted(gguf, cache_root=Path(tmp) / "gguf-cache")
        files = LLMFiles(gguf, folder, (folder / "model.safetensors",), from_gguf=True)
        model, tokenizer = build_causal_lm(files), load_tokenizer(files)
        ids = build_prompt_ids(tokenizer, PROMPT)
        _warm_forward(model)
        rates = time_decoding(model, ids, args.tokens, args.repeats)
    hf_gguf = time_transformers_gguf(gguf) if args.with_transformers_gguf else None

    print(
        f"\nSmolLM2 GGUF ({gguf.name}), float32, {torch.get_num_threads()} threads, "
        f"prompt {len(ids)} tokens, {args.tokens} new tokens, median of {args.repeats}\n"
    )
    print("| measure | ours | reference | ratio | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| greedy tokens/s (vs `model.generate`) | {rates['ours']:.2f} | {rates['generate']:.2f} | "
        f"{rates['ours'] / rates['generate']:.3f}x | >= 0.95x |"
    )
    print(f"| GGUF load, cached vs cold (s) | {cached:.2f} | {cold:.2f} | {cached / cold:.3f}x | <= 0.15x |")
    if hf_gguf is not None:
        print(
            f"| GGUF load, cached vs `from_pretrained(gguf_file=)` (s) | {cached:.2f} | {hf_gguf:.2f} | "
            f"{cached / hf_gguf:.3f}x | |"
        )
    print(
        f"\nours: time to first token {rates['ttft']:.3f} s, decode {rates['decode']:.2f} tokens/s; "
        f"token-for-token identical to model.generate: {'yes' if rates['same'] else 'NO'}"
    )


if __name__ == "__main__":
    main()
