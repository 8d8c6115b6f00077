"""Single-file checkpoints at full size: peak RSS, load time and pictures, next to the diffusers folder.

Generates (into a temp dir, deleted afterwards unless --keep) an SD 1.5-architecture model from the shipped
configs (resources/configs/sd15) with random weights (PyTorch's default init, fixed seed), written twice
from the same float16 tensors: as an original-layout single file (`model.diffusion_model.*`, 2.1 GB, what
model sites share) and as a diffusers folder. Then runs txt2img (256x256, 4 Euler steps, CFG 7, float32 on
CPU) through the pipeline code, one process per mode and one mode at a time, with RSS sampled from outside
(psutil, 50 Hz) and the kernel's high-water mark (VmHWM, never reset) read by the child at exit.

Bars (issue 20):
  - sequential peak <= 1.10x (baseline after imports + largest component + activations estimate)
  - `stream --ram-budget 1GiB` runs with process peak <= 1.6 GiB, single file and folder
  - single-file load time <= 1.1x the folder's (each component loaded once, fastest of --repeat)
  - identical pictures (bit for bit) across none / sequential / stream and single file vs folder

    .venv/bin/python benchmarks/single_file.py [--dir DIR] [--keep] [--repeat 2]
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
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GiB = 1024**3
MiB = 1024**2
PROMPT = "a lighthouse on a cliff at dusk"
SIZE, STEPS, CFG, SEED = 256, 4, 7.0, 42
STREAM_BUDGET = "1GiB"
# (source, policy): the full runs, in this order (one at a time: the box is shared).
RUNS = (
    ("single", "none"),
    ("single", "sequential"),
    ("single", "stream"),
    ("folder", "sequential"),
    ("folder", "stream"),
)


# -- generating the model -------------------------------------------------------------------------------


def random_state(factory, seed: int) -> dict:
    """A module's state dict in float16 with PyTorch's default init, one leaf module at a time.

    Built on the meta device and materialised leaf by leaf, so generating the 1.7 GB UNet never holds its
    3.4 GB float32 form.
    """
    import torch
    from accelerate import init_empty_weights

    with init_empty_weights():
        module = factory()
    expected = set(module.state_dict())
    torch.manual_seed(seed)
    out = {}
    for name, leaf in module.named_modules():
        own = [k for k, p in leaf._parameters.items() if p is not None]
        if not own:
            continue
        leaf.to_empty(device="cpu", recurse=False)
        if hasattr(leaf, "reset_parameters"):
            leaf.reset_parameters()
        else:
            for k in own:
                torch.nn.init.normal_(leaf._parameters[k].data, std=0.02)
        for k in own:
            out[f"{name}.{k}" if name else k] = leaf._parameters[k].detach().to(torch.float16)
            leaf._parameters[k] = None
    assert set(out) == expected, sorted(expected ^ set(out))[:5]
    return out


def generate(work: Path) -> tuple[Path, Path]:
    """Write `sd15.safetensors` (original layout) and `sd15-diffusers/` from the same float16 tensors."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel

    from pipelines.diffusion.export import clip_to_original, unet_to_original, vae_to_original
    from pipelines.diffusion.single_file import CONFIG_DIRS, SHIPPED_BPE, clip_tokenizer_from_bpe

    configs = CONFIG_DIRS["sd1"]
    single, folder = work / "sd15.safetensors", work / "sd15-diffusers"
    if single.exists() and (folder / "complete").exists():
        return single, folder
    shutil.copytree(configs, folder, dirs_exist_ok=True)
    clip_tokenizer_from_bpe(SHIPPED_BPE).save_pretrained(folder / "tokenizer")
    unet_config = UNet2DConditionModel.load_config(configs / "unet")
    vae_config = AutoencoderKL.load_config(configs / "vae")
    text_config = CLIPTextConfig.from_pretrained(configs / "text_encoder")
    original: dict[str, torch.Tensor] = {}
    for sub, file, factory, to_original in (
        ("unet", "diffusion_pytorch_model", lambda: UNet2DConditionModel.from_config(unet_config),
         lambda sd: unet_to_original(sd, dict(unet_config))),
        ("vae", "diffusion_pytorch_model", lambda: AutoencoderKL.from_config(vae_config),
         lambda sd: vae_to_original(sd, dict(vae_config))),
        ("text_encoder", "model", lambda: CLIPTextModel(text_config), clip_to_original),
    ):  # fmt: skip
        state = random_state(factory, seed=len(original))
        save_file(state, str(folder / sub / f"{file}.safetensors"))
        original.update(to_original(state))
        del state
    save_file({k: v.contiguous() for k, v in original.items()}, str(single))
    (folder / "complete").write_text("1")
    return single, folder


# -- one mode per process -------------------------------------------------------------------------------


def child(source: str, policy: str, single: Path, folder: Path, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    import diffusers  # noqa: F401 - imported before the baseline so "above imports" means what it says
    import transformers  # noqa: F401

    # The model classes and diffusers' converters too: a process imports them once whichever file it loads,
    # and their import (2-5 s here, noisy) would otherwise drown the loading being compared.
    from diffusers import AutoencoderKL, UNet2DConditionModel  # noqa: F401
    from diffusers.loaders import single_file_utils  # noqa: F401
    from transformers import CLIPTextModel  # noqa: F401

    from memory import LoadEvent, MemoryConfig, MemoryManager
    from memory.devices import peak_rss, read_host
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings, denoiser_working_bytes
    from pipelines.diffusion.vae import decode
    from pipelines.diffusion.values import Latents

    base = read_host().rss
    spec = single if source == "single" else folder
    budget = STREAM_BUDGET if policy == "stream" else None
    # A fresh data dir: no learned peaks from earlier runs, so the working-memory formulas are what is
    # measured (a user's first run).
    config = MemoryConfig(
        device="cpu",
        policy=policy if policy != "load" else "sequential",
        ram_budget=budget,
        data_dir=Path(tempfile.mkdtemp(prefix="nodeloom-peaks-")),
    )
    t0 = time.perf_counter()
    out: dict = {"source": source, "policy": policy, "base": base}
    with MemoryManager(config) as mm:
        t_reg = time.perf_counter()
        model = load_model(mm, str(spec), config_dir=folder if source == "single" else None)
        # Registration (header reads, the traced key maps) counts as loading too.
        registration = time.perf_counter() - t_reg
        out["weights"] = {h.spec.name: h.weight_bytes for h in mm.ledger.handles.values()}
        if policy == "load":  # each component loaded once (built and filled), then unloaded
            for h in mm.ledger.handles.values():
                with mm.use(h):
                    pass
            out["load_s"] = registration + sum(e.seconds for e in mm.telemetry.events(LoadEvent))
        else:
            with torch.no_grad():
                pos = encode_prompt(mm, model.text_encoder, PROMPT)
                neg = encode_prompt(mm, model.text_encoder, "")
                latents = Latents(torch.zeros(1, 4, SIZE // 8, SIZE // 8), 8)
                settings = SamplerSettings("euler", steps=STEPS, cfg=CFG, seed=SEED)
                image = decode(mm, model.vae, sample(mm, model.denoiser, pos, neg, latents, settings))
            out["sha"] = hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()[:16]
            out["finite"] = bool(torch.isfinite(image).all())
            out["activations"] = denoiser_working_bytes(model.denoiser, SIZE, SIZE, 1, True)
            out["load_s"] = registration + sum(e.seconds for e in mm.telemetry.events(LoadEvent))
    out["wall"] = time.perf_counter() - t0
    out["vmhwm"] = peak_rss()
    return out


def run_child(source: str, policy: str, single: Path, folder: Path, threads: int) -> dict:
    """Run one mode in a fresh process, sampling its RSS from here at 50 Hz."""
    import psutil

    cmd = [sys.executable, __file__, "--child", source, policy, "--single", str(single), "--dir", str(folder)]
    cmd += ["--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    done = threading.Event()

    def sampler() -> None:
        p = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], p.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    stdout, stderr = proc.communicate(timeout=1800)
    done.set()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"{source} {policy} failed:\n{stderr[-4000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["sampled_peak"] = peak[0]
    result["peak"] = max(peak[0], result["vmhwm"] or 0)
    return result


# -- report ---------------------------------------------------------------------------------------------


def report(runs: list[dict], loads: dict[str, float], weights: dict[str, int]) -> tuple[str, bool]:
    by = {(r["source"], r["policy"]): r for r in runs}
    largest = max(weights.values())
    lines = [
        f"SD 1.5 architecture, random weights, float16 on disk (2.1 GB), float32 in RAM "
        f"({sum(weights.values()) / GiB:.2f} GiB: UNet {weights['unet'] / GiB:.2f}, text encoder "
        f"{weights['text_encoder'] / GiB:.2f}, VAE {weights['vae'] / GiB:.2f}); txt2img {SIZE}x{SIZE}, {STEPS} "
        "Euler steps, CFG 7, CPU; one process per mode, peak = max(outside RSS sampler at 50 Hz, VmHWM).",
        "",
        "| source | policy | peak RSS (GiB) | above imports (GiB) | bar | wall (s) | load (s) | picture |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    ok = True
    reference = by[("single", "none")]["sha"]
    for r in runs:
        if r["policy"] == "sequential":
            floor = r["base"] + largest + r["activations"]
            good = r["peak"] <= 1.10 * floor
            bar = f"{r['peak'] / floor:.2f}x of floor {floor / GiB:.2f} (<= 1.10x) {'ok' if good else 'MISS'}"
        elif r["policy"] == "stream":
            good = r["peak"] <= 1.6 * GiB
            bar = f"<= 1.60 GiB {'ok' if good else 'MISS'}"
        else:
            good, bar = True, ""
        same = r["sha"] == reference and r["finite"]
        ok = ok and good and same
        lines.append(
            f"| {r['source']} | {r['policy']}{' ' + STREAM_BUDGET if r['policy'] == 'stream' else ''} | "
            f"{r['peak'] / GiB:.2f} | {(r['peak'] - r['base']) / GiB:.2f} | {bar} | {r['wall']:.1f} | "
            f"{r['load_s']:.1f} | {'identical' if same else 'DIFFERS'} ({r['sha'][:8]}) |"
        )
    ratio = loads["single"] / loads["folder"]
    ok = ok and ratio <= 1.1
    lines += [
        "",
        f"Load time, every component once (fastest run): single file {loads['single']:.2f} s, folder "
        f"{loads['folder']:.2f} s -> {ratio:.2f}x (bar <= 1.10x) {'ok' if ratio <= 1.1 else 'MISS'}.",
    ]
    return "\n".join(lines), ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temp dir)")
    parser.add_argument("--single", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the generated 4 GB of files")
    parser.add_argument("--repeat", type=int, default=3, help="load-time runs per source")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--load-only", action="store_true", help="only the load-time comparison")
    parser.add_argument("--child", nargs=2, metavar=("SOURCE", "POLICY"))
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT)]
    if args.child:
        print(json.dumps(child(*args.child, args.single, args.dir, args.threads)))
        return

    work = args.dir or Path(tempfile.mkdtemp(prefix="nodeloom-single-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        single, folder = generate(work)
        print(f"model: {single} and {folder} ready in {time.perf_counter() - t0:.0f} s", flush=True)
        loads: dict[str, list[float]] = {"single": [], "folder": []}
        for _ in range(args.repeat):
            for source in loads:  # interleaved, so a burst of load elsewhere hits both
                r = run_child(source, "load", single, folder, args.threads)
                loads[source].append(r["load_s"])
                weights = r["weights"]
                print(f"  load {source:<6} {r['load_s']:5.2f} s  peak {r['peak'] / GiB:.2f} GiB", flush=True)
        if args.load_only:
            best = {k: min(v) for k, v in loads.items()}
            print(f"\nload: single {best['single']:.2f} s, folder {best['folder']:.2f} s -> "
                  f"{best['single'] / best['folder']:.2f}x (bar <= 1.10x)")  # fmt: skip
            return
        runs = []
        for source, policy in RUNS:
            r = run_child(source, policy, single, folder, args.threads)
            runs.append(r)
            print(f"  {source:<6} {policy:<10} peak {r['peak'] / GiB:5.2f} GiB  wall {r['wall']:5.1f} s  "
                  f"{r['sha'][:8]}", flush=True)  # fmt: skip
        text, ok = report(runs, {k: min(v) for k, v in loads.items()}, weights)
        print()
        print(text)
        print(f"\nall bars: {'PASS' if ok else 'MISS'}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
