"""GPU offload benchmark: an SD-shaped UNet (~2.5 GB fp16) at 512x512, 20 steps, under shrinking budgets.

Runs, in one process, one after another (each on a freshly loaded UNet):
  resident           everything on the GPU (also measures the working memory: the "learned" peak)
  ours stream 100/50/25%   MemoryManager policy stream, weights budget = that share of the UNet's weights
                            (plus the measured working memory)
  diffusers model offload       DiffusionPipeline.enable_model_cpu_offload
  diffusers sequential offload  DiffusionPipeline.enable_sequential_cpu_offload
  diffusers group offload       apply_group_offloading(leaf_level, use_stream=True)
and prints seconds, peak allocated, and host-to-device GB/s against the pinned-copy bandwidth measured first.
Needs CUDA; without it, it says so and exits with status 2. Finishes in a few minutes on a current GPU.

    .venv/bin/python benchmarks/offload_gpu.py [--steps 20] [--size 512] [--width 384] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from _sd_shaped import unet_config  # noqa: E402

from memory import ComponentSpec, MemoryConfig, MemoryManager  # noqa: E402
from memory.weights import header_bytes  # noqa: E402

GIB = 1024**3
# SD 1.x's UNet is 860M parameters at width 320; at 384 it is ~1.24B, ~2.5 GB in fp16.
DEFAULT_WIDTH = 384


def require_cuda() -> None:
    if not torch.cuda.is_available():
        print(
            "offload_gpu.py needs a CUDA GPU, and this torch build sees none (torch.cuda.is_available() is False).\n"
            "Nothing was run. For the CPU comparison use benchmarks/offload_cpu.py.",
            file=sys.stderr,
        )
        raise SystemExit(2)


def build_unet_folder(folder: Path, width: int = DEFAULT_WIDTH, dtype: torch.dtype = torch.float16) -> Path:
    """Save a random SD-shaped UNet (fixed seed) as diffusers safetensors; built on the GPU when there is one."""
    from diffusers import UNet2DConditionModel

    config_path = folder / "config.json"
    if config_path.exists() and any(folder.glob("*.safetensors")):
        if json.loads(config_path.read_text())["block_out_channels"][0] == width:
            return folder
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        unet = UNet2DConditionModel(**unet_config(width)).to(dtype)
    unet.save_pretrained(folder)
    del unet
    return folder


def unet_blocks(unet: torch.nn.Module) -> tuple[str, ...]:
    """Streamable lists at resnet / transformer granularity: the window is two of these, not two whole stages.

    Declared in execution order (down stages, mid block, up stages); inside a stage resnets and attentions
    interleave, which the streamer learns on the first call."""

    def parts(prefix: str, block: torch.nn.Module) -> list[str]:
        return [f"{prefix}.{p}" for p in ("resnets", "attentions") if len(getattr(block, p, None) or ())]

    paths = [p for i, b in enumerate(unet.down_blocks) for p in parts(f"down_blocks.{i}", b)]
    paths += parts("mid_block", unet.mid_block)
    paths += [p for i, b in enumerate(unet.up_blocks) for p in parts(f"up_blocks.{i}", b)]
    return tuple(paths)


def load_unet(folder: Path) -> torch.nn.Module:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel.from_pretrained(folder, dtype=torch.float16).eval()


def pinned_bandwidth(nbytes: int = GIB, repeats: int = 5) -> float:
    """Host-to-device GB/s of one pinned buffer copied `repeats` times: the ceiling for any streaming."""
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src, non_blocking=True)
    end.record()
    torch.cuda.synchronize()
    return nbytes * repeats / (start.elapsed_time(end) / 1000) / 1e9


def denoise(unet: torch.nn.Module, steps: int, size: int, device: str = "cuda") -> torch.Tensor:
    """A fixed 20-step loop: CFG batch of 2, latents at size/8, a plain Euler-like update (no scheduler)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(1, 4, size // 8, size // 8, generator=g).to(device, torch.float16)
    ctx = torch.randn(2, 77, 768, generator=g).to(device, torch.float16)
    with torch.no_grad():
        for i in range(steps):
            t = torch.tensor(999 - i * (1000 // steps), device=device)
            noise = unet(torch.cat([x, x]), t, encoder_hidden_states=ctx).sample
            uncond, cond = noise.chunk(2)
            x = x - 0.05 * (uncond + 7.5 * (cond - uncond))
    return x


def measure(name: str, run: Callable[[], dict]) -> dict:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    extra = run()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() - base
    row = {"name": name, "seconds": seconds, "peak": peak, **extra}
    print(f"  {name:<32} {seconds:7.1f} s   peak {peak / GIB:6.2f} GiB", flush=True)
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--width", type=int, default=DEFAULT_WIDTH)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "nodeloom-unet-fp16")
    args = parser.parse_args()
    require_cuda()

    from diffusers import DiffusionPipeline
    from diffusers.hooks import apply_group_offloading

    folder = build_unet_folder(args.dir, args.width)
    files = tuple(sorted(folder.glob("*.safetensors")))
    weights = header_bytes(files, torch.float16)
    gbps_pinned = pinned_bandwidth()
    print(f"UNet {weights / GIB:.2f} GiB fp16, {args.steps} steps at {args.size}x{args.size}, "
          f"{torch.cuda.get_device_name()}; pinned H2D {gbps_pinned:.1f} GB/s", flush=True)  # fmt: skip
    rows: list[dict] = []
    spec_blocks = unet_blocks(load_unet(folder))
    data_dir = Path(tempfile.mkdtemp(prefix="nodeloom-bench-"))

    def ours(fraction: float | None, working: int) -> Callable[[], dict]:
        def run() -> dict:
            policy = "none" if fraction is None else "stream"
            budget = None if fraction is None else str(int(fraction * weights + working))
            cfg = MemoryConfig(device="cuda", policy=policy, vram_budget=budget, data_dir=data_dir)
            with MemoryManager(cfg) as mm:
                h = mm.register(ComponentSpec("unet", "unet", "denoiser", lambda: load_unet(folder), files,
                                              torch.float16, spec_blocks))  # fmt: skip
                with (
                    mm.node_scope("denoise", "Denoise", f"{args.size}"),
                    mm.use(h, working_bytes=working) as unet,
                ):
                    t0 = time.perf_counter()
                    denoise(unet, args.steps, args.size)
                    torch.cuda.synchronize()
                    steps_s = time.perf_counter() - t0
                report = mm.report()
            streamed = [t for t in report["transfers"] if "streamed" in t["component"]]
            nbytes = sum(t["nbytes"] for t in streamed)
            copy_s = sum(t["seconds"] for t in streamed)
            return {
                "steps_s": steps_s,
                "h2d_bytes": nbytes,
                "copy_gbps": nbytes / copy_s / 1e9 if copy_s else 0.0,
                "working": report["node_peaks"][0]["peak_bytes"] - report["node_peaks"][0]["baseline_bytes"],
            }

        return run

    resident = measure("resident (ours, policy none)", ours(None, 0))
    rows.append(resident)
    working = max(resident["peak"] - weights, 0)  # measured, as the learned store would give it
    for fraction in (1.0, 0.5, 0.25):
        rows.append(measure(f"ours stream {fraction:.0%}", ours(fraction, working)))

    def diffusers_run(kind: str) -> Callable[[], dict]:
        def run() -> dict:
            unet = load_unet(folder)

            class UNetOnly(DiffusionPipeline):
                model_cpu_offload_seq = "unet"

                def __init__(self, unet: torch.nn.Module) -> None:
                    super().__init__()
                    self.register_modules(unet=unet)

            if kind == "group":
                apply_group_offloading(unet, onload_device="cuda", offload_type="leaf_level", use_stream=True)
            else:
                pipe = UNetOnly(unet)
                (pipe.enable_model_cpu_offload if kind == "model" else pipe.enable_sequential_cpu_offload)(
                    device="cuda"
                )
            t0 = time.perf_counter()
            denoise(unet, args.steps, args.size)
            torch.cuda.synchronize()
            steps_s = time.perf_counter() - t0
            # Bytes are not reported by diffusers: model offload moves the weights once; the others every step.
            moved = weights if kind == "model" else weights * args.steps
            return {"steps_s": steps_s, "h2d_bytes": moved, "copy_gbps": 0.0}

        return run

    for kind, label in (
        ("model", "model offload"),
        ("sequential", "sequential offload"),
        ("group", "group offload"),
    ):
        rows.append(measure(f"diffusers {label}", diffusers_run(kind)))

    print()
    print(f"| run | seconds (load + {args.steps} steps) | steps only (s) | peak allocated (GiB) | "
          f"H2D moved (GB) | effective H2D GB/s | copy-engine GB/s (ours) | of pinned {gbps_pinned:.0f} GB/s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        eff = r["h2d_bytes"] / r["steps_s"] / 1e9 if r["steps_s"] else 0.0
        copy = f"{r['copy_gbps']:.1f}" if r["copy_gbps"] else "-"
        share = f"{(r['copy_gbps'] or eff) / gbps_pinned:.0%}" if r["h2d_bytes"] else "-"
        print(f"| {r['name']} | {r['seconds']:.1f} | {r['steps_s']:.1f} | {r['peak'] / GIB:.2f} | "
              f"{r['h2d_bytes'] / 1e9:.1f} | {eff:.1f} | {copy} | {share} |")  # fmt: skip


if __name__ == "__main__":
    main()
