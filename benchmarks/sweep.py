"""Sweep throughput: a seed sweep of the demo workflow three ways, side by side in one run.

  local      `app --run txt2img.json --sweep sampler.seed=1..N --threads 1`: one process, one worker
  ray        the same with `--cluster ray --workers 2 --threads 1`: a private loopback Ray, 2 CPU workers
  processes  N separate `app --run txt2img.json --set sampler.seed=I --threads 1`, one after another

Prints images per minute of each sweep (jobs only: from its report, start-up excluded) and the wall time of each
whole command (start-up included), then the two ratios the sweep is judged by (plus the CPU-time ratio of the
second, from the children's rusage, which a busy machine moves less):
  ray / local images per minute   (goal >= 1.6 on 2 cores)
  processes wall / local wall     (goal >= 1.5)
and whether the Ray pictures equal the local ones bit for bit. Each command runs in its own process, one at a
time; on a shared machine the figures move with the load, so run it when the machine is quiet.

    .venv/bin/python benchmarks/sweep.py [--seeds 16] [--steps 20] [--workers 2]

May import: stdlib, PIL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "resources" / "workflows" / "txt2img.json"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def app(args: list[str]) -> float:
    """Run `app ARGS` in a fresh process; returns its wall time. Fails loudly if the command fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.main", *args], cwd=ROOT, env=env, capture_output=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"app {' '.join(args)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return wall


def pictures(report: dict) -> dict[int, bytes]:
    out = {}
    for job in report["jobs"]:
        with Image.open(job["outputs"][0]) as image:
            out[job["values"]["sampler.seed"]] = image.tobytes()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    common = ["--run", str(WORKFLOW), "--set", f"sampler.steps={args.steps}", "--threads", "1", "--quiet"]
    sweep = ["--sweep", f"sampler.seed=1..{args.seeds}"]
    with tempfile.TemporaryDirectory(prefix="nodeloom-bench-sweep-") as tmp:
        out = Path(tmp)
        print(
            f"{args.seeds} seeds of {WORKFLOW.name}, {args.steps} steps, 1 torch thread per worker",
            flush=True,
        )

        cpu = children_cpu()
        local_wall = app(common + sweep + ["--out", str(out / "local")])
        local_cpu = children_cpu() - cpu
        local = json.loads((out / "local" / "sweep.json").read_text())
        print(f"  local sweep done in {local_wall:.1f} s", flush=True)

        ray_wall = app(
            common + sweep + ["--out", str(out / "ray"), "--cluster", "ray", "--workers", str(args.workers)]
        )
        ray = json.loads((out / "ray" / "sweep.json").read_text())
        print(f"  ray sweep done in {ray_wall:.1f} s", flush=True)

        started, cpu = time.perf_counter(), children_cpu()
        for seed in range(1, args.seeds + 1):
            app(common + ["--set", f"sampler.seed={seed}", "--out", str(out / "processes")])
        processes_wall = time.perf_counter() - started
        processes_cpu = children_cpu() - cpu
        print(f"  {args.seeds} processes done in {processes_wall:.1f} s", flush=True)

        same = pictures(ray) == pictures(local)

    def rate(report: dict) -> float:
        return report["totals"]["images_per_min"]

    rows = [
        ("local sweep (1 worker)", rate(local), local["totals"]["wall_seconds"], local_wall),
        (f"ray sweep ({args.workers} CPU workers)", rate(ray), ray["totals"]["wall_seconds"], ray_wall),
        (f"{args.seeds} separate processes", args.seeds / processes_wall * 60.0, None, processes_wall),
    ]
    print()
    print(f"{'':32} {'images/min (jobs)':>18} {'jobs wall s':>12} {'command wall s':>15}")
    for name, images_per_min, jobs_wall, wall in rows:
        jobs = f"{jobs_wall:12.1f}" if jobs_wall is not None else f"{'-':>12}"
        print(f"{name:32} {images_per_min:18.1f} {jobs} {wall:15.1f}")
    for worker in ray["workers"]:
        print(
            f"  ray {worker['worker']}: {worker['jobs']} jobs, {worker['images_per_min']:.1f} images/min, "
            f"loads {worker['load_counts']}, peak RSS {worker['memory']['process_peak_rss'] / 2**20:.0f} MiB"
        )
    print()
    print(f"ray / local throughput (jobs only):     {rate(ray) / rate(local):.2f}x  (goal >= 1.6)")
    print(f"ray / local throughput (whole command): {local_wall / ray_wall:.2f}x  (Ray start-up included)")
    print(f"processes / local sweep wall time:      {processes_wall / local_wall:.2f}x  (goal >= 1.5)")
    print(
        f"processes / local sweep CPU time:       {processes_cpu / local_cpu:.2f}x  "
        f"({processes_cpu:.1f} s vs {local_cpu:.1f} s; steadier than wall time on a busy machine)"
    )
    print(f"ray pictures equal local pictures:      {same}")


if __name__ == "__main__":
    main()
