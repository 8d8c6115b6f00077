"""Where int8 txt2img's peak goes: RSS sampled from outside per node, float32 vs int8, under two policies.

Lives here: the script. Imports stdlib, psutil, PIL, numpy, and benchmarks/plan_accuracy.py's sampler (the
child: `app.main`, `memory.manager`). Per (weights, policy): `app --run txt2img.json` on benchmarks/
_sd_shaped.py's ~1.1 GiB model at 256x256 in a fresh process and an empty data dir (CPU, one thread), its
RSS read from /proc/PID/statm from outside on a fixed `--hz` clock; the child writes a mark (CLOCK_MONOTONIC,
shared by both processes) as each node starts and ends, so each sample is put in its node. Printed: per node
the peak RSS above the process baseline (the plan's `baseline_rss`: RSS after the loaders and imports), the
run's peak above it, int8 / float32, the plan's predicted host peak against the measured, and the picture's
PSNR against float32 under the same policy (8-bit PNGs: int8's change is far above their rounding).

    PYTHONPATH=$PWD python benchmarks/int8_peak.py [--dir DIR] [--steps 2] [--policies none sequential]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MiB = 2**20
SD_RECIPE = {"unet_width": 128, "text_layers": 5, "vae_width": 128}  # benchmarks/offload_cpu.py's ~1.1 GiB


def child(marks: Path, argv: list[str]) -> int:
    """`app.main` in this process, with a mark per node start and end (the manager's `node_scope`)."""
    from contextlib import contextmanager

    from app.main import main
    from memory.manager import MemoryManager

    scope = MemoryManager.node_scope
    out = marks.open("w", buffering=1)

    @contextmanager
    def marked(self, node_id, node_type, **kwargs):  # noqa: ANN001, ANN202 - MemoryManager.node_scope's
        out.write(f"{time.monotonic()} start {node_id}\n")
        try:
            with scope(self, node_id, node_type, **kwargs):
                yield
        finally:
            out.write(f"{time.monotonic()} end {node_id}\n")

    MemoryManager.node_scope = marked  # type: ignore[method-assign]
    return main(argv)


def _rss(pid: int, page: int = os.sysconf("SC_PAGE_SIZE")) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * page
    except OSError:
        return 0


def trace(cmd: list[str], env: dict[str, str], hz: float) -> tuple[int, list[tuple[float, int]]]:
    """(exit code, [(monotonic time, RSS)]) of `cmd`, sampled on a fixed clock."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    samples: list[tuple[float, int]] = []
    period, next_at = 1.0 / hz, time.monotonic()
    while proc.poll() is None:
        samples.append((time.monotonic(), _rss(proc.pid)))
        next_at = max(next_at + period, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))
    return proc.returncode, samples


def per_node(samples: list[tuple[float, int]], marks: Path) -> dict[str, int]:
    """Peak RSS of the samples taken while each node ran."""
    spans: dict[str, list[float]] = {}
    for line in marks.read_text().splitlines():
        t, what, node = line.split(" ", 2)
        spans.setdefault(node, []).append(float(t))
    peaks = {node: [r for t, r in samples if ts[0] <= t <= ts[-1]] for node, ts in spans.items()}
    return {node: max(rs) for node, rs in peaks.items() if rs}  # a node shorter than a sample has none


def psnr(a: Path, b: Path) -> float:
    import numpy as np
    from PIL import Image

    x = np.asarray(Image.open(a), dtype=np.float64) / 255
    y = np.asarray(Image.open(b), dtype=np.float64) / 255
    mse = float(((x - y) ** 2).mean())
    return float("inf") if mse == 0 else 10 * float(np.log10(1.0 / mse))


def run_case(folder: Path, dtype: str, policy: str, steps: int, hz: float, work: Path) -> dict:
    case = work / f"{dtype}-{policy}"
    case.mkdir()
    report, marks = case / "report.json", case / "marks.txt"
    argv = ["--run", str(REPO / "resources/workflows/txt2img.json"), "--device", "cpu", "--offload", policy]
    argv += ["--threads", "1", "--quiet", "--out", str(case), "--report", str(report)]
    for item in (f"load.path={folder}", f"load.dtype={dtype}", "latent.width=256", "latent.height=256"):
        argv += ["--set", item]
    argv += ["--set", f"sampler.steps={steps}", "--set", "sampler.preview_every=0"]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(marks), "--", *argv]
    env = dict(os.environ, NODELOOM_DATA_DIR=str(case / "data"))
    started = time.monotonic()
    code, samples = trace(cmd, env, hz)
    if code != 0:
        raise SystemExit(f"{dtype} under {policy}: exit {code}")
    data = json.loads(report.read_text())
    (image,) = sorted(case.glob("*.png"))
    return {
        "baseline": data["plan"]["baseline_rss"],
        "predicted": data["plan"]["predicted_peak"]["host"],
        "peak": max(r for _, r in samples),
        "nodes": per_node(samples, marks),
        "hz": len(samples) / (time.monotonic() - started),
        "image": image,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "nodeloom-sd-shaped-1gb")
    p.add_argument("--steps", type=int, default=2, help="sampler steps (the peak does not grow with steps)")
    p.add_argument("--policies", nargs="+", default=["none", "sequential"])
    p.add_argument("--hz", type=float, default=40.0)
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args, rest = p.parse_known_args()
    if args.child is not None:
        return child(args.child, rest[1:] if rest[:1] == ["--"] else rest)
    sys.path[:0] = [str(HERE)]
    from _sd_shaped import build_pipeline_folder

    build_pipeline_folder(args.dir, **SD_RECIPE)
    print(f"load average {os.getloadavg()[0]:.1f}, {psutil.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies:
            rows = {
                d: run_case(args.dir, d, policy, args.steps, args.hz, Path(tmp)) for d in ("float32", "int8")
            }
            ref = rows["float32"]
            print(f"\n{policy}: peak RSS above the baseline, MiB (float32 / int8), per node:")
            for node in ref["nodes"]:
                if node not in rows["int8"]["nodes"]:
                    continue
                f, q = (rows[d]["nodes"][node] - rows[d]["baseline"] for d in ("float32", "int8"))
                print(f"  {node:<9} {f / MiB:>6.0f} / {q / MiB:>6.0f}")
            for d, r in rows.items():
                print(
                    f"  {d:<8} baseline {r['baseline'] / MiB:.0f} MiB, peak {r['peak'] / MiB:.0f} MiB "
                    f"({(r['peak'] - r['baseline']) / MiB:.0f} above), plan predicted {r['predicted'] / MiB:.0f} "
                    f"MiB ({r['predicted'] / r['peak']:.2f}x measured), sampled at {r['hz']:.0f} Hz"
                )
            above = {d: r["peak"] - r["baseline"] for d, r in rows.items()}
            print(
                f"  int8 / float32 above the baseline: {above['int8'] / above['float32']:.3f}; int8 PSNR vs "
                f"float32: {psnr(rows['int8']['image'], ref['image']):.1f} dB; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
