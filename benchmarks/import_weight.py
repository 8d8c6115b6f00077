"""Import weight of `app nodes`: wall time and peak RSS, an old commit against this tree, side by side.

The old tree is extracted with `git archive` into a temp folder; each repeat runs `python -m app.main nodes`
in the old tree, then in this one (alternating, so load on a shared machine hits both alike). Peak RSS is the
kernel's per-child figure from `os.wait4` (ru_maxrss; nothing is reset), wall time is measured around the
child. Prints medians and the new/old ratio (goal: <= 0.5 for both).

    .venv/bin/python benchmarks/import_weight.py [--old 1917e92] [--repeats 5]

May import: stdlib only (the children import the app).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def extract(commit: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_once(tree: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one `app nodes` in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "nodes"], cwd=tree, env=env, stdout=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"`app nodes` failed in {tree} (exit {proc.returncode})")
    return wall, usage.ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="1917e92", help="the commit to compare against")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeloom-old-") as tmp:
        old = extract(args.old, Path(tmp))
        trees = {f"old ({args.old})": old, "new (this tree)": ROOT}
        for tree in trees.values():
            run_once(tree)  # warm the file cache for both
        walls: dict[str, list[float]] = {k: [] for k in trees}
        rss: dict[str, list[int]] = {k: [] for k in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                wall, peak = run_once(tree)
                walls[name].append(wall)
                rss[name].append(peak)
    print(f"`app nodes`, median of {args.repeats} runs each, alternating")
    print(f"{'tree':<20} {'wall s':>8} {'peak RSS MiB':>14}")
    med = {k: (statistics.median(walls[k]), statistics.median(rss[k])) for k in trees}
    for name, (wall, peak) in med.items():
        print(f"{name:<20} {wall:>8.2f} {peak / 2**20:>14.1f}")
    (o_wall, o_rss), (n_wall, n_rss) = med.values()
    print(f"{'new / old':<20} {n_wall / o_wall:>7.2f}x {n_rss / o_rss:>13.2f}x")


if __name__ == "__main__":
    main()
