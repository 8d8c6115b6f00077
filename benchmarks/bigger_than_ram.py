"""A model whose file is bigger than the machine's RAM, streamed: peak RSS, s/step against its floor, and the
picture against a run with a larger budget on the same file.

Lives here: the script. Imports stdlib, psutil, torch, safetensors, diffusers (to name the tensors of the
architecture on the meta device and to build the VAE), pipelines.diffusion.demo_models (the tiny
Qwen-Image demo's tokenizer and text encoder).

The model: a random-weight transformer of Qwen-Image's architecture (`QwenImageTransformer2DModel`) at its
published size (60 layers, 24 heads x 128: 20.4B parameters, 40.9 GB in bfloat16), written tensor by tensor
into a diffusers folder (nothing is held whole: a fixed random pool is sliced per tensor), with a full-size
Qwen-Image VAE (random) and the tiny demo's tokenizer and text encoder. Only where the text comes in differs
from the published config: `joint_attention_dim` is the tiny encoder's width (16, not Qwen2.5-VL-7B's 3584:
11M of the 20.4B parameters). The scheduler is Qwen-Image's without `shift_terminal` (which divides by zero
at one step).

Each run is `app --run txt2img.json` in a fresh process on CPU (`--offload stream --ram-budget B`, one
step at 256x256, cfg 1: one forward), niced, its RSS sampled from outside (/proc/PID/statm) at `--hz` and its disk
reads from /proc/PID/io. The floor of a step: max(compute, bytes read / disk bandwidth), compute measured
as one block's forward with its weights in RAM times the layer count, the bandwidth by reading 1 GiB of the
file cold. The folder is deleted at the end unless `--keep`.

    PYTHONPATH=$PWD python benchmarks/bigger_than_ram.py --layers 2 --heads 4      # a small trial
    PYTHONPATH=$PWD nice -n 10 python benchmarks/bigger_than_ram.py                # full size (~41 GB)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30
_PAGE = os.sysconf("SC_PAGE_SIZE")
POOL = 1 << 24  # random values sliced per tensor (32 MiB in bfloat16)

# Qwen-Image's published transformer config (Qwen/Qwen-Image transformer/config.json).
FULL = dict(
    patch_size=2,
    in_channels=64,
    out_channels=16,
    num_layers=60,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=16,  # the tiny demo text encoder's width (published: 3584)
    guidance_embeds=False,
    axes_dims_rope=(16, 56, 56),
)


def _write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], seed: int) -> int:
    """Random bfloat16 weights for `shapes`, written tensor by tensor; returns the file's size.

    2-D and larger weights: N(0, 1/fan_in) (activations keep their scale through 60 blocks); norm weights
    1; other 1-D tensors (biases) N(0, 0.02^2). Each tensor is a slice of one seeded pool at an offset
    from its name, so the file is deterministic and building it costs the writes, not the sampling."""
    g = torch.Generator().manual_seed(seed)
    pool = torch.randn(2 * POOL, generator=g).to(torch.bfloat16)
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for name, shape in shapes.items():
            n = header[name]["data_offsets"][1] // 2 - header[name]["data_offsets"][0] // 2
            if len(shape) == 1 and "norm" in name:
                scale, add = 0.0, 1.0
            elif len(shape) == 1:
                scale, add = 0.02, 0.0
            else:
                fan_in = 1
                for d in shape[1:]:
                    fan_in *= d
                scale, add = fan_in**-0.5, 0.0
            start = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % POOL
            done = 0
            while done < n:
                take = min(POOL, n - done)
                chunk = pool[start : start + take]
                chunk = chunk * scale + add if scale != 1.0 or add else chunk
                f.write(chunk.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
                done += take
                start = (start + 7919) % POOL
    return path.stat().st_size


def build_folder(root: Path, layers: int, heads: int, vae_base: int) -> tuple[Path, dict[str, int]]:
    """The diffusers folder (see the module docstring); returns it and the architecture's figures."""
    from diffusers import AutoencoderKLQwenImage, QwenImageTransformer2DModel

    from pipelines.diffusion.demo_models import ensure_demo_model

    tiny = ensure_demo_model("tiny-qwenimage")
    folder = root / f"qwenimage-{layers}x{heads}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for part in ("text_encoder", "tokenizer", "model_index.json"):
        src = tiny / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, folder / part)
    sched = json.loads((tiny / "scheduler/scheduler_config.json").read_text())
    sched["shift_terminal"] = None  # one step: the terminal stretch divides by (1 - last sigma) = 0
    (folder / "scheduler").mkdir()
    (folder / "scheduler/scheduler_config.json").write_text(json.dumps(sched, indent=2))
    config = dict(FULL, num_layers=layers, num_attention_heads=heads)
    with torch.device("meta"):
        model = QwenImageTransformer2DModel(**config)
    (folder / "transformer").mkdir()
    model.save_config(folder / "transformer")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    params = sum(p.numel() for p in model.parameters())
    started = time.perf_counter()
    size = _write_safetensors(folder / "transformer/diffusion_pytorch_model.safetensors", shapes, seed=0)
    written = time.perf_counter() - started
    torch.manual_seed(0)
    vae = AutoencoderKLQwenImage(base_dim=vae_base, z_dim=16)
    vae.save_pretrained(folder / "vae")
    return folder, {"params": params, "bytes": size, "write_s": written}


def disk_bandwidth(path: Path, nbytes: int = GiB) -> float:
    """Bytes/s reading `nbytes` of `path` cold (its pages dropped from the cache first), 16 MiB at a time."""
    from memory.weights import drop_file_pages

    size = path.stat().st_size
    nbytes = min(nbytes, size)
    start = max(0, size // 2 - nbytes // 2)
    drop_file_pages([(path, 0, size)])
    fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        done = 0
        while done < nbytes:
            chunk = os.pread(fd, min(16 * 2**20, nbytes - done), start + done)
            if not chunk:
                break
            done += len(chunk)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
    drop_file_pages([(path, 0, size)])
    return done / seconds


def block_compute_seconds(heads: int, image_tokens: int, text_tokens: int, repeats: int = 2) -> float:
    """One transformer block's forward at the run's token counts with its weights in RAM (float32, as the
    CPU runs it): the compute a streamed step cannot go below, per block."""
    from diffusers.models.transformers.transformer_qwenimage import QwenImageTransformerBlock

    dim = heads * 128
    torch.manual_seed(0)
    block = QwenImageTransformerBlock(dim, heads, 128).eval()
    img = torch.randn(1, image_tokens, dim)
    txt = torch.randn(1, text_tokens, dim)
    temb = torch.randn(1, dim)
    freqs = (
        torch.ones(image_tokens, 64, dtype=torch.complex64),
        torch.ones(text_tokens, 64, dtype=torch.complex64),
    )
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            t0 = time.perf_counter()
            block(img, txt, None, temb, freqs)
            best = min(best, time.perf_counter() - t0)
    return best


def run_once(folder: Path, budget: str, out: Path, hz: float, cfg: float = 1.0) -> dict[str, float]:
    """One `app --run` in a fresh niced process; RSS and disk reads sampled from outside. `cfg` is the value
    that means no guidance (one forward a step): 1 for most families, 0 for Z-Image and Krea 2."""
    report = out / "report.json"
    cmd = [sys.executable, "-m", "app.main", "--run", str(REPO / "resources/workflows/txt2img.json")]
    cmd += ["--set", f"load.path={folder}", "--set", "sampler.steps=1", "--set", f"sampler.cfg={cfg:g}"]
    cmd += ["--set", "sampler.scheduler=euler", "--set", "latent.width=256", "--set", "latent.height=256"]
    cmd += ["--device", "cpu", "--offload", "stream", "--ram-budget", budget, "--quiet"]
    cmd += ["--out", str(out), "--report", str(report)]
    started = time.perf_counter()
    child = subprocess.Popen(["nice", "-n", "10", *cmd], cwd=REPO)
    # `nice` execs the interpreter: the child's pid is the run's process.
    proc, peak, samples, read = psutil.Process(child.pid), 0, 0, 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/statm", "rb") as f:  # one small read: cheaper than psutil's
                peak = max(peak, int(f.read().split()[1]) * _PAGE)
            if samples % 10 == 0:  # bytes this process had the disk read (page cache misses), cumulative
                read = proc.io_counters().read_bytes
        except (OSError, psutil.Error):
            pass
        samples += 1
        time.sleep(1.0 / hz)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"run under {budget}: exit {child.returncode}")
    data = json.loads(report.read_text())
    steps = [s["seconds"] for s in data["memory"]["steps"] if s["kind"] == "sampler_step"]
    pngs = sorted(out.glob("*.png"))
    return {
        "peak_rss": peak,
        "reported_peak_rss": data["memory"]["process_peak_rss"],
        "read_bytes": read,
        "hz": samples / seconds,
        "seconds": seconds,
        "step_s": steps[0] if steps else float("nan"),
        "decode_s": data["runs"][0]["nodes"]["decode"]["seconds"],
        "png": pngs[-1].read_bytes() if pngs else b"",
    }


def _png_pixels(data: bytes) -> torch.Tensor:
    import io

    import numpy as np
    from PIL import Image

    return torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).copy())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=None, help="where to build the folder (default: a temp dir)")
    p.add_argument("--layers", type=int, default=60)
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--vae-base", type=int, default=96, help="the VAE's base width (published: 96)")
    p.add_argument("--budgets", nargs=2, default=["6GiB", "12GiB"], help="the run, and the larger one")
    p.add_argument("--hz", type=float, default=40.0)
    p.add_argument("--keep", action="store_true", help="keep the built folder")
    args = p.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="nodeloom-bigger-"))
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    # 340M parameters per full-size block (2 bytes each) scale with heads^2: the need before writing.
    need = int(2 * 340e6 * (args.heads / 24) ** 2 * args.layers) + 2 * GiB
    print(
        f"disk: {free / GiB:.1f} GiB free at {root}, the folder needs about {need / GiB:.1f} GiB", flush=True
    )
    if free < need:
        print("not enough disk for this size: pass fewer --layers", flush=True)
        return 1
    ram = psutil.virtual_memory().total
    try:
        folder, arch = build_folder(root, args.layers, args.heads, args.vae_base)
        tfile = folder / "transformer/diffusion_pytorch_model.safetensors"
        print(
            f"built: {arch['params'] / 1e9:.2f}B parameters, {arch['bytes'] / GiB:.1f} GiB in bfloat16 "
            f"(RAM {ram / GiB:.1f} GiB), written in {arch['write_s']:.0f} s "
            f"({arch['bytes'] / arch['write_s'] / GiB:.2f} GiB/s)",
            flush=True,
        )
        bandwidth = disk_bandwidth(tfile)
        print(f"disk read bandwidth (cold, 16 MiB reads): {bandwidth / GiB:.2f} GiB/s", flush=True)
        results = []
        for budget in args.budgets:
            with tempfile.TemporaryDirectory() as out:
                r = run_once(folder, budget, Path(out), args.hz)
            results.append(r)
            print(
                f"--ram-budget {budget}: peak RSS {r['peak_rss'] / GiB:.2f} GiB sampled at {r['hz']:.0f} Hz "
                f"({r['peak_rss'] / _parse(budget):.2f}x the budget; the run's own figure "
                f"{r['reported_peak_rss'] / GiB:.2f} GiB), read {r['read_bytes'] / GiB:.1f} GiB from disk, "
                f"step {r['step_s']:.1f} s, decode {r['decode_s']:.1f} s, whole run {r['seconds']:.0f} s",
                flush=True,
            )
        block_s = block_compute_seconds(args.heads, image_tokens=256, text_tokens=8)
        compute = block_s * args.layers
        first = results[0]
        io_floor = first["read_bytes"] / bandwidth
        floor = max(compute, io_floor)
        print(
            f"floor of a step: max(compute {compute:.1f} s = {args.layers} x {block_s:.2f} s per block, "
            f"read {first['read_bytes'] / GiB:.1f} GiB / {bandwidth / GiB:.2f} GiB/s = {io_floor:.1f} s) = "
            f"{floor:.1f} s; measured {first['step_s']:.1f} s ({first['step_s'] / floor:.2f}x the floor)",
            flush=True,
        )
        a, b = _png_pixels(results[0]["png"]), _png_pixels(results[1]["png"])
        same = torch.equal(a, b)
        print(
            f"picture under {args.budgets[0]} vs {args.budgets[1]}: "
            + ("identical" if same else f"differs (max |d| {int((a.int() - b.int()).abs().max())})")
            + f"; {a.shape[1]}x{a.shape[0]}, pixel std {a.float().std():.1f}",
            flush=True,
        )
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(root / f"qwenimage-{args.layers}x{args.heads}", ignore_errors=True)
            if args.root is None:
                shutil.rmtree(root, ignore_errors=True)


def _parse(budget: str) -> int:
    from memory.config import parse_bytes

    return parse_bytes(budget)


if __name__ == "__main__":
    sys.exit(main())
