"""Per image family on CPU: s/step at 256x256 of a full-size random-weight transformer streamed from disk
under a RAM budget, with the peak RSS against that budget (issue 26's per-family figure).

Lives here: the script. Imports stdlib, torch, diffusers (the transformer class on the meta device, the VAE),
pipelines.diffusion.demo_models (each family's tiny demo: tokenizer, text encoder, scheduler) and
benchmarks/bigger_than_ram.py (the file writer, the disk bandwidth probe and the measured run).

Each family's folder is its tiny demo with the transformer replaced by one at the published size (the
config shipped in resources/configs/<released>/transformer) and the published VAE (random weights, so the
latent has the real size: 256 px = 32x32 latents for an 8x VAE). Only where the text comes in differs from
the published config: the caption width is the tiny text encoder's (a few thousand of the billions of
parameters). The weights are written tensor by tensor in bfloat16 into a temp folder under the user data
dir (never into git) and deleted afterwards; the run is `app --run txt2img.json` with one step, no guidance (cfg 1, or 0 for
Z-Image and Krea 2: one forward), `--offload stream --ram-budget B`, in a fresh niced process whose RSS is sampled from outside at
`--hz` (>= 20). The floor: max(2 x parameters x tokens / the measured bfloat16->float32 matmul rate, bytes
read / the cold disk bandwidth).

    PYTHONPATH=$PWD nice -n 10 python benchmarks/family_stream_cpu.py --family zimage
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bigger_than_ram import GiB, _parse, _write_safetensors, disk_bandwidth, run_once  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FamilyBench:
    demo: str  # the tiny demo whose text encoder, tokenizer and scheduler the folder keeps
    released: str  # resources/configs/<released>: the published transformer and VAE configs
    text_key: str | tuple[str, ...]  # the caption width (and any text-side block shape), set to the tiny's
    transformer_class: str
    vae_class: str
    layers_key: str  # for a quick trial with fewer layers (--layers)


BENCHES = {
    "zimage": FamilyBench(
        "tiny-zimage", "zimage-turbo", "cap_feat_dim", "ZImageTransformer2DModel", "AutoencoderKL", "n_layers"
    ),
    "qwenimage": FamilyBench(
        "tiny-qwenimage",
        "qwen-image",
        "joint_attention_dim",
        "QwenImageTransformer2DModel",
        "AutoencoderKLQwenImage",
        "num_layers",
    ),
    # Krea 2 fuses the stacked text-encoder layers in blocks at the text encoder's own width, so the whole
    # text side (width, selected layers, heads, MLP) is the tiny's: about 0.3B of the published ~12B.
    "krea2": FamilyBench(
        "tiny-krea2",
        "krea-2",
        (
            "text_hidden_dim",
            "num_text_layers",
            "text_num_attention_heads",
            "text_num_key_value_heads",
            "text_intermediate_size",
        ),
        "Krea2Transformer2DModel",
        "AutoencoderKLQwenImage",
        "num_layers",
    ),
    "qwenimage21": FamilyBench(
        "tiny-qwenimage21",
        "qwen-image-2.1",
        "context_in_dim",
        "QwenImage21Transformer2DModel",
        "AutoencoderKLQwenImage21",
        "num_layers",
    ),
    "flux2klein4b": FamilyBench(
        "tiny-flux2-klein",
        "flux2-klein-4b",
        "joint_attention_dim",
        "Flux2Transformer2DModel",
        "AutoencoderKLFlux2",
        "num_single_layers",
    ),
    "flux2klein9b": FamilyBench(
        "tiny-flux2-klein",
        "flux2-klein-9b",
        "joint_attention_dim",
        "Flux2Transformer2DModel",
        "AutoencoderKLFlux2",
        "num_single_layers",
    ),
}


def _config(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def build_folder(root: Path, name: str, layers: int | None = None) -> tuple[Path, dict[str, float]]:
    import diffusers

    from pipelines.diffusion.demo_models import ensure_demo_model

    bench = BENCHES[name]
    tiny = ensure_demo_model(bench.demo)
    folder = root / f"{name}-full"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    # Everything but the two replaced parts: the tokenizer, or Qwen-Image 2.1's processor, come as the tiny has them.
    for src in tiny.iterdir():
        if src.name not in ("transformer", "vae"):
            (shutil.copytree if src.is_dir() else shutil.copy)(src, folder / src.name)
    released = REPO / "resources/configs" / bench.released
    config = _config(released / "transformer/config.json")
    tiny_config = _config(tiny / "transformer/config.json")
    for key in (bench.text_key,) if isinstance(bench.text_key, str) else bench.text_key:
        config[key] = tiny_config[key]
    if layers is not None:
        config[bench.layers_key] = layers
    with torch.device("meta"):
        model = getattr(diffusers, bench.transformer_class).from_config(config)
    (folder / "transformer").mkdir()
    model.save_config(folder / "transformer")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    params = sum(p.numel() for p in model.parameters())
    started = time.perf_counter()
    size = _write_safetensors(folder / "transformer/diffusion_pytorch_model.safetensors", shapes, seed=0)
    written = time.perf_counter() - started
    torch.manual_seed(0)
    vae = getattr(diffusers, bench.vae_class).from_config(_config(released / "vae/config.json"))
    vae.save_pretrained(folder / "vae")
    return folder, {"params": params, "bytes": size, "write_s": written}


def matmul_flops(n: int = 2048, repeats: int = 3) -> float:
    """FLOP/s of an n x n float32 matmul on this CPU (the streamed bfloat16 weights are computed in float32)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def _stop_on_sigterm() -> None:
    """`kill PID` (SIGTERM) ends the run like Ctrl-C: the measured child is ended by its pid and the
    `finally` below deletes the tens of GiB written (a bare SIGTERM would skip it and leave them on disk)."""

    def stop(signum: int, frame: object) -> None:
        for child in psutil.Process().children(recursive=True):
            try:
                child.terminate()
            except psutil.Error:
                pass
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=sorted(BENCHES), required=True)
    p.add_argument("--budget", default="4GiB")
    p.add_argument("--hz", type=float, default=40.0)
    p.add_argument("--layers", type=int, default=None, help="fewer layers than published: a quick trial")
    p.add_argument("--root", type=Path, default=None, help="default: a temp dir under the user data dir")
    args = p.parse_args()
    _stop_on_sigterm()
    from memory import user_data_dir

    base = args.root or user_data_dir()
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-", dir=base))
    print(f"disk: {shutil.disk_usage(root).free / GiB:.1f} GiB free at {root}", flush=True)
    try:
        folder, arch = build_folder(root, args.family, args.layers)
        tfile = folder / "transformer/diffusion_pytorch_model.safetensors"
        print(
            f"{args.family}: {arch['params'] / 1e9:.2f}B parameters, {arch['bytes'] / GiB:.1f} GiB in bfloat16 "
            f"(RAM {psutil.virtual_memory().total / GiB:.1f} GiB), written in {arch['write_s']:.0f} s",
            flush=True,
        )
        bandwidth = disk_bandwidth(tfile)
        with tempfile.TemporaryDirectory() as out:
            # One forward a step: cfg 1 is no guidance for most families, 0 where the pipeline guides as
            # pos + g * (pos - neg) (Z-Image, Krea 2: there cfg 1 runs the negative too, reading the file twice).
            from pipelines.diffusion.families import FAMILIES

            family = FAMILIES.get(args.family)  # the bench names are the registry's where they share one
            no_guidance = 1.0 - (family.comfy_cfg_offset if family is not None else 0.0)
            r = run_once(folder, args.budget, Path(out), args.hz, cfg=no_guidance)
        tokens = (256 // 16) ** 2  # 8x VAE with 2x2 patches, or Qwen-Image 2.1's 16x VAE with 1x1
        compute = 2 * arch["params"] * tokens / matmul_flops()
        io_floor = r["read_bytes"] / bandwidth
        floor = max(compute, io_floor)
        print(
            f"--ram-budget {args.budget}: peak RSS {r['peak_rss'] / GiB:.2f} GiB sampled at {r['hz']:.0f} Hz "
            f"({r['peak_rss'] / _parse(args.budget):.2f}x the budget), read {r['read_bytes'] / GiB:.1f} GiB, "
            f"step {r['step_s']:.1f} s, decode {r['decode_s']:.1f} s, whole run {r['seconds']:.0f} s; floor "
            f"max(compute {compute:.1f} s, read at {bandwidth / GiB:.2f} GiB/s {io_floor:.1f} s) = {floor:.1f} s: "
            f"{r['step_s'] / floor:.2f}x the floor; load average {psutil.getloadavg()[0]:.1f}",
            flush=True,
        )
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
