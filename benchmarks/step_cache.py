"""Step caches on a DiT: our Sampler with `cache` off / taylorseer against diffusers' ZImagePipeline, one process.

Builds (once, cached in its own folder) a Z-Image-shaped random-weight pipeline of about 0.7 GB (the
transformer at 1024 wide, 12 layers: a quarter of Z-Image Turbo's width; a small Qwen3 and VAE), then times
text-to-image at 256x256 with CFG, end to end, loading included:
  diffusers    ZImagePipeline.from_pretrained(folder)(...) (no cache)
  graph        txt2img.json through the Executor, policy none, cache off (the same picture as diffusers)
  graph-taylor the same with cache taylorseer at `--interval` (attention computed every N steps)
Runs alternate after one warm-up round; medians of wall and CPU time are printed with the ratio to diffusers,
the uint8 max difference graph vs diffusers and the PSNR of each cached picture against the uncached one.
Random weights change more from step to step than trained ones, so a cache costs more quality here than on
a real model at the same setting.

    .venv/bin/python benchmarks/step_cache.py [--dir DIR] [--steps 8] [--size 256] [--repeats 2] [--interval 3]

May import: stdlib, numpy, torch, diffusers, transformers, memory, nodes, pipelines.
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

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory import MemoryConfig, MemoryManager  # noqa: E402
from nodes.executor import Executor  # noqa: E402
from nodes.registry import default_registry  # noqa: E402
from nodes.workflow import workflow_from_dict  # noqa: E402

WORKFLOW = ROOT / "resources" / "workflows" / "txt2img.json"
PROMPT = "a lighthouse on a cliff at dusk"
NEGATIVE = "blurry"
# A quarter of Z-Image Turbo's width (3840 -> 1024; heads of 128 as the release), 12 of its 30 layers.
TRANSFORMER = dict(dim=1024, n_layers=12, n_refiner_layers=2, n_heads=8, n_kv_heads=8, axes_dims=[32, 48, 48])
TEXT = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=64,
)


def build_folder(folder: Path) -> Path:
    if (folder / "model_index.json").exists():
        return folder
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        ZImagePipeline,
        ZImageTransformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3Model

    from pipelines.diffusion import demo_zimage as demo

    torch.manual_seed(0)
    config = {**demo.TINY_ZIMAGE, **TRANSFORMER, "cap_feat_dim": TEXT["hidden_size"]}
    transformer = ZImageTransformer2DModel(**config)
    with torch.no_grad():
        transformer.x_pad_token.copy_(torch.ones_like(transformer.x_pad_token))
        transformer.cap_pad_token.copy_(torch.ones_like(transformer.cap_pad_token))
    vae = AutoencoderKL(**{**demo.TINY_ZIMAGE_VAE, "block_out_channels": [32, 64, 64], "norm_num_groups": 16})
    tokenizer = demo.tiny_qwen_tokenizer()
    qwen = Qwen3Model(Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=512, **TEXT))
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False
    )
    pipe = ZImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=qwen, tokenizer=tokenizer, transformer=transformer
    )
    pipe.save_pretrained(str(folder))
    return folder


def run_diffusers(folder: Path, *, steps: int, size: int, cfg: float) -> tuple[float, float, np.ndarray]:
    from diffusers import ZImagePipeline

    started, cpu = time.perf_counter(), time.process_time()
    pipe = ZImagePipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=size,
        width=size,
        num_inference_steps=steps,
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(0),
    ).images[0]
    return time.perf_counter() - started, time.process_time() - cpu, np.asarray(image.convert("RGB"))


def run_graph(
    folder: Path, out_dir: Path, *, steps: int, size: int, cfg: float, cache: str, interval: int
) -> tuple[float, float, np.ndarray]:
    data = json.loads(WORKFLOW.read_text())
    nodes = data["nodes"]
    nodes["load"]["params"]["path"] = str(folder)
    nodes["positive"]["params"]["text"] = PROMPT
    nodes["negative"]["params"]["text"] = NEGATIVE
    nodes["latent"]["params"].update(width=size, height=size)
    nodes["sampler"]["params"].update(
        scheduler="default",
        steps=steps,
        cfg=cfg,
        seed=0,
        preview_every=0,
        cache=cache,
        cache_threshold=interval,
    )
    registry = default_registry(entry_point_packs=False)
    wf = workflow_from_dict(data, registry)
    started, cpu = time.perf_counter(), time.process_time()
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=out_dir / "data"))
    try:
        result = Executor(registry, memory=mm).run(wf, targets=["decode"], out_dir=out_dir)
    finally:
        mm.close()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if not result.ok:
        raise RuntimeError(result.error)
    image = result.outputs["decode"]["image"][0].clamp(0, 1)
    return seconds, cpu, (image.numpy() * 255).round().astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "nodeloom-step-cache-dit")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--cfg", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--interval", type=int, default=3, help="taylorseer: steps between full computations")
    args = parser.parse_args()

    folder = build_folder(args.dir)
    size_mb = sum(f.stat().st_size for f in folder.rglob("*.safetensors")) / 1e6
    print(f"model: {folder} ({size_mb:.0f} MB of weights)")
    print(
        f"settings: {args.size}x{args.size}, {args.steps} steps, cfg {args.cfg}, float32, {torch.get_num_threads()} threads\n"
    )
    settings = dict(steps=args.steps, size=args.size, cfg=args.cfg)
    runs = {"diffusers": None, "graph": "off", "graph-taylor": "taylorseer"}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    images: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats + 1):  # round 0 warms the page cache and is not counted
            for name, cache in runs.items():
                if cache is None:
                    seconds, cpu, images[name] = run_diffusers(folder, **settings)
                else:
                    out = Path(tmp) / f"{name}-{repeat}"
                    seconds, cpu, images[name] = run_graph(
                        folder, out, cache=cache, interval=args.interval, **settings
                    )
                if repeat:
                    times[name].append((seconds, cpu))
                print(
                    f"  round {repeat}{' (warm-up)' if not repeat else ''}: {name:<13} {seconds:6.2f} s wall, {cpu:6.2f} s CPU"
                )

    wall = {name: statistics.median(v[0] for v in values) for name, values in times.items()}
    cpu = {name: statistics.median(v[1] for v in values) for name, values in times.items()}
    print(
        f"\n{'':<14}{'wall s':>9}{'vs diffusers':>14}{'CPU s':>9}{'vs diffusers':>14}   (medians, loading included)"
    )
    for name in runs:
        print(
            f"{name:<14}{wall[name]:>9.2f}{wall[name] / wall['diffusers']:>13.3f}x"
            f"{cpu[name]:>9.2f}{cpu[name] / cpu['diffusers']:>13.3f}x"
        )
    diff = np.abs(images["graph"].astype(int) - images["diffusers"].astype(int)).max()
    print(f"\ngraph vs diffusers: max uint8 difference {diff}")
    print(
        f"graph-taylor (interval {args.interval}) vs graph: PSNR {psnr(images['graph-taylor'], images['graph']):.1f} dB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
