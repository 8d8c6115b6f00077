"""Overhead of our node graph vs diffusers' StableDiffusionPipeline, same model, same settings, one process.

Builds (once, cached in its own folder) an SD-shaped random-weight model of about 1 GB, then times
text-to-image (prompt + empty negative, Euler, CFG, VAE decode, float32, CPU) end to end, loading included:
  diffusers   StableDiffusionPipeline.from_pretrained(folder)(...)
  graph       txt2img.json through the Executor (LoadDiffusionModel -> TextEncode x2 -> EmptyLatent -> Sampler
              -> VAEDecode), MemoryManager policy none (everything stays resident, as in the pipeline)
  graph-seq   the same under policy sequential (each model unloaded after use)
Runs alternate (diffusers, graph, graph-seq) after one warm-up of each; medians of wall time and of process
CPU time are printed side by side with the ratio to diffusers (goal for `graph`: <= 1.05x) and the max pixel
difference between the two images. CPU time is the steadier figure on a shared machine; `--threads 1` makes
it steadier still (both sides get the same threads).

    .venv/bin/python benchmarks/diffusion_overhead.py [--dir DIR] [--steps 8] [--size 256] [--repeats 2]
                                                      [--threads N]

May import: stdlib, torch, diffusers, memory, nodes, pipelines, benchmarks/_sd_shaped.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _sd_shaped import build_pipeline_folder  # noqa: E402

from memory import MemoryConfig, MemoryManager  # noqa: E402
from nodes.executor import Executor  # noqa: E402
from nodes.registry import default_registry  # noqa: E402
from nodes.workflow import workflow_from_dict  # noqa: E402

RECIPE = {
    "unet_width": 128,
    "text_layers": 4,
    "vae_width": 96,
}  # ~560 + 265 + 190 MB in float32 (offload_cpu)
PROMPT = "a lighthouse on a cliff at dusk"
WORKFLOW = ROOT / "resources" / "workflows" / "txt2img.json"


def run_diffusers(
    folder: Path, *, steps: int, size: int, cfg: float, seed: int
) -> tuple[float, float, torch.Tensor]:
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline

    started, cpu = time.perf_counter(), time.process_time()
    pipe = StableDiffusionPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt="",
        height=size,
        width=size,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(seed),
        output_type="pt",
    ).images
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    del pipe
    return seconds, cpu, image.permute(0, 2, 3, 1)


def run_graph(
    folder: Path, *, policy: str, steps: int, size: int, cfg: float, seed: int, out_dir: Path
) -> tuple[float, float, torch.Tensor]:
    data = json.loads(WORKFLOW.read_text())
    nodes = data["nodes"]
    nodes["load"]["params"]["path"] = str(folder)
    nodes["positive"]["params"]["text"] = PROMPT
    nodes["latent"]["params"].update(width=size, height=size)
    nodes["sampler"]["params"].update(scheduler="euler", steps=steps, cfg=cfg, seed=seed, preview_every=0)
    registry = default_registry(entry_point_packs=False)
    wf = workflow_from_dict(data, registry)
    started, cpu = time.perf_counter(), time.process_time()
    mm = MemoryManager(MemoryConfig(device="cpu", policy=policy, data_dir=out_dir / "data"))
    result = Executor(registry, memory=mm).run(wf, targets=["decode"], out_dir=out_dir)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if not result.ok:
        raise RuntimeError(result.error)
    image = result.outputs["decode"]["image"]
    mm.close()
    return seconds, cpu, image


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=Path(tempfile.gettempdir()) / "nodeloom-diffusion-overhead-1gb"
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--cfg", type=float, default=7.5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    started = time.perf_counter()
    folder = build_pipeline_folder(args.dir, **RECIPE)
    size_mb = sum(f.stat().st_size for f in folder.rglob("*.safetensors")) / 1e6
    print(f"model: {folder} ({size_mb:.0f} MB of weights, ready in {time.perf_counter() - started:.1f} s)")
    print(
        f"settings: {args.size}x{args.size}, euler, {args.steps} steps, cfg {args.cfg}, float32, "
        f"{torch.get_num_threads()} threads\n"
    )

    settings = dict(steps=args.steps, size=args.size, cfg=args.cfg, seed=0)
    times: dict[str, list[tuple[float, float]]] = {"diffusers": [], "graph": [], "graph-seq": []}
    images: dict[str, torch.Tensor] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for repeat in range(args.repeats + 1):  # the first round warms caches and is not counted
            for name in times:
                if name == "diffusers":
                    seconds, cpu, images[name] = run_diffusers(folder, **settings)
                else:
                    policy = "none" if name == "graph" else "sequential"
                    seconds, cpu, images[name] = run_graph(folder, policy=policy, out_dir=out, **settings)
                if repeat:
                    times[name].append((seconds, cpu))
                print(
                    f"  round {repeat}{' (warm-up)' if not repeat else ''}: {name:<10} {seconds:6.2f} s wall, "
                    f"{cpu:6.2f} s CPU"
                )

    wall = {name: statistics.median(v[0] for v in values) for name, values in times.items()}
    cpu = {name: statistics.median(v[1] for v in values) for name, values in times.items()}
    print(f"\n{'':<12}{'wall s':>9}{'vs diffusers':>14}{'CPU s':>9}{'vs diffusers':>14}   (medians)")
    for name in times:
        print(
            f"{name:<12}{wall[name]:>9.2f}{wall[name] / wall['diffusers']:>13.3f}x"
            f"{cpu[name]:>9.2f}{cpu[name] / cpu['diffusers']:>13.3f}x"
        )
    diff = (images["graph"] - images["diffusers"]).abs().max().item()
    print(f"\nmax abs pixel difference graph vs diffusers: {diff:.2e}")
    for what, table in (("wall", wall), ("CPU", cpu)):
        ratio = table["graph"] / table["diffusers"]
        print(
            f"goal graph <= 1.05x diffusers ({what} time): {'met' if ratio <= 1.05 else 'NOT met'} ({ratio:.3f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
