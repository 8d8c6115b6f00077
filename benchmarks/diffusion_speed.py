"""Seconds per denoising step: our Sampler against diffusers' pipelines, caches off and on, and the floor.

Three random-weight models, built once and kept in their own folders (`--model`):
  sd    the SD-shaped 1 GB model of benchmarks/diffusion_overhead.py (UNet, CLIP, VAE), Euler, cfg 7.5
  sd3   an SD3-shaped DiT (SD3Transformer2DModel, 512 wide, 8 joint blocks, patch 2; tiny CLIPs, T5 and VAE
        from pipelines.diffusion.demo_models), its flow-matching Euler, cfg 5 on a doubled batch
  flux  a FLUX.1-dev-shaped DiT (512 wide, 4 double + 8 single blocks; tiny CLIP, T5 and VAE), guidance 3.5
Each side keeps its model loaded across runs (diffusers: one pipeline; ours: one MemoryManager, policy none,
a new Executor per run so every node runs again), and the runs alternate:
  diffusers   the diffusers pipeline, no cache
  ours        txt2img.json through the Executor, cache off (the same picture: uint8 max difference printed)
  ours-cache  the same with the Sampler's step cache at `--threshold` (PSNR against `ours` printed): sd
              `easy` 0.2 (the one that runs on a UNet), sd3 `taylorseer` 3 (diffusers' First-Block Cache
              fails on SD3's last block), flux `first-block` 0.2
s/step is the denoising loop's time over its steps: from the loop's first denoiser call (diffusers: a
forward pre-hook on the UNet/transformer) or the Sampler node's start (ours: so our setup counts against
us) to the last step's end (diffusers' `callback_on_step_end`, our Sampler's progress event). CPU time
(process time, both threads) is taken at the same points: the steadier figure on a shared machine. Round 0
warms both sides (page cache, oneDNN primitives, our model load) and is not counted; medians of the rest.

The floor: FLOPs of one denoiser call at the run's shape (torch.utils.flop_counter, CFG's doubled batch)
over the measured float32 matmul rate (a 2048^3 torch.mm at the same thread count): what a step would cost
if every FLOP ran at matmul speed and nothing else took time.

    nice -n 5 .venv/bin/python benchmarks/diffusion_speed.py --model sd [--steps 8] [--size 256]
        [--repeats 2] [--threshold X] [--threads N]
    nice -n 5 .venv/bin/python benchmarks/diffusion_speed.py --model flux

May import: stdlib, numpy, torch, diffusers, transformers, memory, nodes, pipelines, benchmarks/_sd_shaped.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _sd_shaped import build_pipeline_folder  # noqa: E402

from memory import MemoryConfig, MemoryManager  # noqa: E402
from nodes.events import NodeProgress, NodeStarted  # noqa: E402
from nodes.executor import Executor  # noqa: E402
from nodes.registry import default_registry  # noqa: E402
from nodes.workflow import workflow_from_dict  # noqa: E402

PROMPT = "a lighthouse on a cliff at dusk"
NEGATIVE = "blurry"
WORKFLOW = ROOT / "resources" / "workflows" / "txt2img.json"
SD_RECIPE = {"unet_width": 128, "text_layers": 4, "vae_width": 96}  # as benchmarks/diffusion_overhead.py
# SD3 Medium is 1536 wide (24 heads of 64) with 24 joint blocks; a third of the width and of the depth keep a
# step near the SD-shaped model's on this CPU. joint/pooled 64: the tiny text encoders' widths.
SD3_TRANSFORMER = dict(
    sample_size=32,
    patch_size=2,
    in_channels=4,
    out_channels=4,
    num_layers=8,
    attention_head_dim=64,
    num_attention_heads=8,
    caption_projection_dim=512,
    joint_attention_dim=64,
    pooled_projection_dim=64,
)
# FLUX.1 is 3072 wide (24 heads of 128), 19 double + 38 single blocks; here 512 wide (8 heads of 64), 4 + 8.
# in_channels 16: the tiny VAE's 4 latent channels packed 2x2; rotary axes (8, 28, 28) add up to the head dim.
FLUX_TRANSFORMER = dict(
    patch_size=1,
    in_channels=16,
    num_layers=4,
    num_single_layers=8,
    attention_head_dim=64,
    num_attention_heads=8,
    joint_attention_dim=32,
    pooled_projection_dim=32,
    axes_dims_rope=[8, 28, 28],
    guidance_embeds=True,
)


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path
    scheduler: str  # our Sampler's scheduler name (diffusers' pipeline keeps the folder's own, Euler in both)
    cfg: float
    cache: str  # the step cache this benchmark runs on this denoiser
    threshold: float  # its default cache_threshold here


def build_dit_folder(folder: Path, family: str) -> Path:
    """The tiny demo pipeline of `family` with its transformer replaced by the wider one above."""
    if (folder / "model_index.json").exists():
        return folder
    from diffusers import FluxTransformer2DModel, SD3Transformer2DModel

    from pipelines.diffusion.demo_models import build_tiny_flux, build_tiny_sd3

    pipe = build_tiny_sd3() if family == "sd3" else build_tiny_flux()
    torch.manual_seed(0)
    if family == "sd3":
        pipe.transformer = SD3Transformer2DModel(**SD3_TRANSFORMER)
    else:
        pipe.transformer = FluxTransformer2DModel(**FLUX_TRANSFORMER)
    pipe.save_pretrained(str(folder))
    return folder


def _uint8(image: torch.Tensor) -> np.ndarray:
    """(H, W, 3) floats in [0, 1] -> uint8, rounded as our SaveImage and diffusers' numpy_to_pil do."""
    return (image.clamp(0, 1).numpy() * 255).round().astype(np.uint8)


class Clock:
    """Wall and CPU time at the loop's start and at its last step's end."""

    def __init__(self) -> None:
        self.start: tuple[float, float] | None = None
        self.end: tuple[float, float] | None = None

    def mark_start(self) -> None:
        if self.start is None:
            self.start = (time.perf_counter(), time.process_time())

    def mark_step(self) -> None:
        self.end = (time.perf_counter(), time.process_time())

    def per_step(self, steps: int) -> tuple[float, float]:
        assert self.start is not None and self.end is not None, "the loop was not timed"
        return (self.end[0] - self.start[0]) / steps, (self.end[1] - self.start[1]) / steps


class Diffusers:
    def __init__(self, case: Case) -> None:
        from diffusers import DiffusionPipeline, EulerDiscreteScheduler

        self.pipe = DiffusionPipeline.from_pretrained(str(case.folder), dtype=torch.float32)
        if case.name == "sd":
            self.pipe.scheduler = EulerDiscreteScheduler.from_config(self.pipe.scheduler.config)
        self.pipe.set_progress_bar_config(disable=True)
        self.denoiser = getattr(self.pipe, "unet", None) or self.pipe.transformer
        self.case = case
        self.call: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})

    def run(self, *, steps: int, size: int, seed: int) -> tuple[Clock, np.ndarray, float]:
        clock = Clock()

        def first_call(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if clock.start is None:
                self.call = (args, kwargs)  # replayed by denoiser_flops at this exact shape
            clock.mark_start()

        hook = self.denoiser.register_forward_pre_hook(first_call, with_kwargs=True)

        def on_step(pipe: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
            clock.mark_step()
            return kwargs

        try:
            image = self.pipe(
                PROMPT,
                negative_prompt=NEGATIVE,
                height=size,
                width=size,
                num_inference_steps=steps,
                guidance_scale=self.case.cfg,
                generator=torch.Generator("cpu").manual_seed(seed),
                output_type="pt",
                callback_on_step_end=on_step,
            ).images
        finally:
            hook.remove()
        return clock, _uint8(image[0].permute(1, 2, 0)), 0.0


class Ours:
    def __init__(self, case: Case, data_dir: Path) -> None:
        self.mm = MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=data_dir))
        self.registry = default_registry(entry_point_packs=False)
        self.case = case

    def run(
        self, *, steps: int, size: int, seed: int, cache: str, threshold: float, out_dir: Path
    ) -> tuple[Clock, np.ndarray, float]:
        data = json.loads(WORKFLOW.read_text())
        nodes = data["nodes"]
        nodes["load"]["params"]["path"] = str(self.case.folder)
        nodes["positive"]["params"]["text"] = PROMPT
        nodes["negative"]["params"]["text"] = NEGATIVE
        nodes["latent"]["params"].update(width=size, height=size)
        nodes["sampler"]["params"].update(
            scheduler=self.case.scheduler,
            steps=steps,
            cfg=self.case.cfg,
            seed=seed,
            preview_every=0,
            cache=cache,
            cache_threshold=threshold,
        )
        wf = workflow_from_dict(data, self.registry)
        clock = Clock()

        def on_event(event: Any) -> None:
            if isinstance(event, NodeStarted) and event.node_id == "sampler":
                clock.mark_start()
            elif (
                isinstance(event, NodeProgress)
                and event.node_id == "sampler"
                and event.kind == "sampler_step"
            ):
                clock.mark_step()

        result = Executor(self.registry, memory=self.mm).run(
            wf, targets=["decode"], out_dir=out_dir, on_event=on_event
        )
        if not result.ok:
            raise RuntimeError(result.error)
        reused = result.nodes["sampler"].metrics.get("cache_reused_steps", 0.0)
        return clock, _uint8(result.outputs["decode"]["image"][0]), reused

    def close(self) -> None:
        self.mm.close()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def matmul_rates() -> tuple[float, float]:
    """float32 FLOP/s of a 2048^3 torch.mm at the current thread count, per wall second and per CPU second
    (best of 3 each: the floor is optimistic)."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    wall = cpu = float("inf")
    for _ in range(3):
        started, used = time.perf_counter(), time.process_time()
        torch.mm(a, b)
        wall, cpu = min(wall, time.perf_counter() - started), min(cpu, time.process_time() - used)
    return 2 * 2048**3 / wall, 2 * 2048**3 / cpu


def denoiser_flops(side: Diffusers) -> float:
    """FLOPs of one denoiser call as the pipeline made it (CFG's doubled batch), counted by replaying it."""
    from torch.utils.flop_counter import FlopCounterMode

    args, kwargs = side.call
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        side.denoiser(*args, **kwargs)
    return float(counter.get_total_flops())


def timed_rounds(
    runs: dict[str, Callable[[], tuple[Clock, np.ndarray, float]]], *, rounds: int, steps: int
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, np.ndarray], dict[str, float]]:
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    images: dict[str, np.ndarray] = {}
    reused: dict[str, float] = {}
    for repeat in range(rounds + 1):  # round 0 warms both sides and is not counted
        for name, run in runs.items():
            clock, images[name], reused[name] = run()
            wall, cpu = clock.per_step(steps)
            if repeat:
                times[name].append((wall, cpu))
            note = " (warm-up)" if not repeat else ""
            print(
                f"  round {repeat}{note}: {name:<11} {wall:6.3f} s/step wall, {cpu:6.3f} s/step CPU",
                flush=True,
            )
    return times, images, reused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("sd", "sd3", "flux"), default="sd")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="the step cache's cache_threshold (0: the case's default)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.model == "sd":
        folder = build_pipeline_folder(args.dir / "nodeloom-diffusion-overhead-1gb", **SD_RECIPE)
        case = Case("sd", folder, "euler", 7.5, "easy", 0.2)
    elif args.model == "sd3":  # diffusers' First-Block Cache fails on SD3's last block (see step_cache.py)
        case = Case(
            "sd3", build_dit_folder(args.dir / "nodeloom-speed-sd3", "sd3"), "default", 5.0, "taylorseer", 3
        )
    else:  # FLUX.1-dev is guidance-distilled: cfg is the transformer's guidance input, one pass per step
        case = Case(
            "flux",
            build_dit_folder(args.dir / "nodeloom-speed-flux", "flux"),
            "default",
            3.5,
            "first-block",
            0.2,
        )
    threshold = args.threshold or case.threshold
    size_mb = sum(f.stat().st_size for f in case.folder.rglob("*.safetensors")) / 1e6
    print(f"model: {case.folder} ({size_mb:.0f} MB of weights)")
    print(
        f"settings: {args.size}x{args.size}, {args.steps} steps, cfg {case.cfg}, float32, "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}\n"
    )
    settings = dict(steps=args.steps, size=args.size, seed=0)
    reference = Diffusers(case)
    with tempfile.TemporaryDirectory() as tmp:
        ours = Ours(case, Path(tmp) / "data")
        try:
            runs = {
                "diffusers": lambda: reference.run(**settings),
                "ours": lambda: ours.run(**settings, cache="off", threshold=0.1, out_dir=Path(tmp)),
                "ours-cache": lambda: ours.run(
                    **settings, cache=case.cache, threshold=threshold, out_dir=Path(tmp)
                ),
            }
            times, images, reused = timed_rounds(runs, rounds=args.repeats, steps=args.steps)
        finally:
            ours.close()

    wall = {name: statistics.median(v[0] for v in values) for name, values in times.items()}
    cpu = {name: statistics.median(v[1] for v in values) for name, values in times.items()}
    print(
        f"\n{'':<13}{'s/step wall':>12}{'vs diffusers':>14}{'s/step CPU':>12}{'vs diffusers':>14}   (medians)"
    )
    for name in times:
        print(
            f"{name:<13}{wall[name]:>12.3f}{wall[name] / wall['diffusers']:>13.3f}x"
            f"{cpu[name]:>12.3f}{cpu[name] / cpu['diffusers']:>13.3f}x"
        )
    diff = int(np.abs(images["ours"].astype(int) - images["diffusers"].astype(int)).max())
    # The picture's spread says how much a PSNR means: a flat picture reaches a high PSNR whatever the cache does.
    spread = float(images["ours"].astype(np.float64).std())
    print(f"\nours vs diffusers (cache off): max uint8 difference {diff}; picture std {spread:.1f} of 255")
    quality = psnr(images["ours-cache"], images["ours"])
    counted = f"{reused['ours-cache']:.0f} of {args.steps} steps reused, " if case.cache == "easy" else ""
    print(
        f"ours-cache ({case.cache}, threshold {threshold:g}): {counted}PSNR {quality:.1f} dB against ours uncached"
    )
    flops = denoiser_flops(reference)
    rates = matmul_rates()
    for what, table, rate in (("wall", wall, rates[0]), ("CPU", cpu, rates[1])):
        floor = flops / rate
        print(
            f"floor ({what}): {flops / 1e9:.1f} GFLOP per denoiser call / {rate / 1e9:.1f} GFLOP/s matmul = "
            f"{floor:.3f} s/step; ours {table['ours'] / floor:.2f}x it, diffusers {table['diffusers'] / floor:.2f}x"
        )
    for what, table in (("wall", wall), ("CPU", cpu)):
        ratio, cached = table["ours"] / table["diffusers"], table["ours-cache"] / table["diffusers"]
        print(
            f"goal ours <= 0.75x diffusers ({what}): {'met' if ratio <= 0.75 else 'NOT met'} ({ratio:.3f}x); "
            f"goal ours-cache <= 0.5x at >= 30 dB: {'met' if cached <= 0.5 and quality >= 30 else 'NOT met'} "
            f"({cached:.3f}x, {quality:.1f} dB)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
