"""How close is the plan's host prediction to the RSS a system monitor shows? Shipped workflows, two policies.

Lives here: the script. Imports stdlib, psutil. Runs `app --run` in subprocesses (CPU, one torch thread):
per workflow and policy, once with an empty data dir (a first run: nothing learned, GGUF conversions not
cached) and once more with the same dir (working memory learned by the first). The prediction is the plan
the run makes of itself before its first load (`report["plan"]`, the same code as `app plan`, its baseline
measured in that process); the measurement is the process's RSS read from /proc/PID/statm from outside on a
fixed `--hz` clock (default 40), children included. Default: every shipped workflow; `--jobs N` runs N
(workflow, policy) cases at once; `--sd-shaped DIR` adds txt2img on the 1.1 GB SD-shaped model (run first).

    PYTHONPATH=$PWD python benchmarks/plan_accuracy.py [--workflows txt2img llm] [--steps 2] [--jobs 4]
    PYTHONPATH=$PWD python benchmarks/plan_accuracy.py --refusal   # how long `app plan` takes to say "no"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss(pids: list[int]) -> int:
    """RSS of `pids` from /proc/PID/statm: one small read each, so a loaded machine still samples at the rate
    asked for (psutil's `memory_info` costs several times more, and listing children scans all of /proc)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
        except OSError:
            pass
    return total


def sample_peak(child: subprocess.Popen[bytes], hz: float) -> tuple[int, int]:
    """(peak RSS of `child` and its children, samples taken) until it exits. Samples on a fixed clock (a late
    sample does not push the next one back); the children are listed twice a second, not at every sample."""
    proc, peak, samples = psutil.Process(child.pid), 0, 0
    pids, listed = [child.pid], 0.0
    period, next_at = 1.0 / hz, time.perf_counter()
    while child.poll() is None:
        now = time.perf_counter()
        if now - listed >= 0.5:
            try:
                pids = [child.pid, *(c.pid for c in proc.children(recursive=True))]
            except psutil.Error:
                pass
            listed = now
        peak = max(peak, _rss(pids))
        samples += 1
        next_at = max(next_at + period, time.perf_counter())  # late: start the clock again, no burst
        time.sleep(max(0.0, next_at - time.perf_counter()))
    return peak, samples


def shipped_workflows() -> list[str]:
    return sorted(p.stem for p in (REPO / "resources/workflows").glob("*.json"))


def _sampler_nodes(workflow: str) -> list[str]:
    """The workflow's nodes with a `steps` field (Sampler, SamplerAdvanced), to run them at `--steps`."""
    data = json.loads((REPO / f"resources/workflows/{workflow}.json").read_text())
    nodes = data["nodes"]
    items = nodes.items() if isinstance(nodes, dict) else ((n["id"], n) for n in nodes)
    return [nid for nid, n in items if "steps" in (n.get("params") or {})]


def run_once(
    workflow: str, policy: str, data_dir: Path, steps: int, hz: float, sets: tuple[str, ...] = ()
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        report = Path(out) / "report.json"
        cmd = [sys.executable, "-m", "app.main", "--run", str(REPO / f"resources/workflows/{workflow}.json")]
        cmd += ["--device", "cpu", "--offload", policy, "--threads", "1", "--quiet"]
        cmd += ["--out", out, "--report", str(report)]
        for node in _sampler_nodes(workflow):
            cmd += ["--set", f"{node}.steps={steps}"]
        for item in sets:
            cmd += ["--set", item]
        env = dict(os.environ, NODELOOM_DATA_DIR=str(data_dir))
        started = time.perf_counter()
        child = subprocess.Popen(cmd, cwd=REPO, env=env)
        peak, samples = sample_peak(child, hz)
        seconds = time.perf_counter() - started
        if child.returncode != 0:
            raise SystemExit(f"{workflow} under {policy}: exit {child.returncode}")
        data = json.loads(report.read_text())
    plan = data["plan"]
    sources = sorted({w["source"] for n in plan["nodes"] for w in n["working"] if w["model"]})
    return {
        "predicted": plan["predicted_peak"]["host"],
        "measured": peak,
        "baseline": plan["baseline_rss"],
        "hz": samples / seconds,
        "load": os.getloadavg()[0],
        "sources": "+".join(sources),
    }


def refusal_seconds(workflow: str) -> tuple[int, float, float]:
    """(exit code, wall seconds, CPU seconds) of `app plan WORKFLOW --ram-budget 1MiB` in a fresh process:
    a budget below every policy's need, answered from headers and configs (imports included, as a user
    waits for them). CPU seconds beside the wall: on a shared machine the wall time is mostly waiting."""
    cmd = [sys.executable, "-m", "app.main", "plan", str(REPO / f"resources/workflows/{workflow}.json")]
    cmd += ["--device", "cpu", "--ram-budget", "1MiB"]
    before = os.times()
    started = time.perf_counter()
    code = subprocess.run(cmd, cwd=REPO, capture_output=True).returncode
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return code, wall, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflows", nargs="*", default=None, help="default: every shipped workflow")
    p.add_argument("--runs", choices=("both", "first"), default="both", help="first: no learned run")
    p.add_argument("--policies", nargs="+", default=["none", "sequential"])
    p.add_argument("--steps", type=int, default=4, help="sampler steps (the peak does not grow with steps)")
    p.add_argument("--hz", type=float, default=40.0)
    p.add_argument("--jobs", type=int, default=1, help="cases (workflow x policy) run at once")
    p.add_argument("--refusal", action="store_true", help="only time `app plan` on a budget nothing fits")
    p.add_argument(
        "--sd-shaped",
        type=Path,
        default=None,
        metavar="DIR",
        help="also txt2img on the 1.1 GB SD-shaped model of benchmarks/_sd_shaped.py at 256x256 (built in DIR)",
    )
    args = p.parse_args()
    args.workflows = shipped_workflows() if args.workflows is None else args.workflows
    if args.refusal:
        for workflow in args.workflows:
            code, wall, cpu = refusal_seconds(workflow)
            print(f"app plan {workflow} --ram-budget 1MiB: exit {code} in {wall:.1f} s (CPU {cpu:.1f} s)")
        return 0
    print(
        f"{'workflow':<14} {'policy':<11} {'run':<8} {'predicted':>10} {'measured':>10} {'ratio':>6}  sampled  working"
    )
    cases: list[tuple[str, str, tuple[str, ...]]] = [(w, w, ()) for w in args.workflows]
    if args.sd_shaped is not None:
        sys.path[:0] = [str(REPO / "benchmarks")]
        from _sd_shaped import build_pipeline_folder

        # benchmarks/offload_cpu.py's ~1.1 GiB recipe, as benchmarks/precision.py builds it
        build_pipeline_folder(args.sd_shaped, unet_width=128, text_layers=5, vae_width=128)
        sizes = ("latent.width=256", "latent.height=256")
        # first: its runs are the longest, so they do not finish last
        cases.insert(0, ("sd-shaped-1.1G", "txt2img", (f"load.path={args.sd_shaped}", *sizes)))
    jobs = [(name, workflow, sets, policy) for name, workflow, sets in cases for policy in args.policies]
    labels = ("first", "learned") if args.runs == "both" else ("first",)

    def one_case(job: tuple[str, str, tuple[str, ...], str]) -> list[tuple[str, dict]]:
        name, workflow, sets, policy = job
        rows = []
        with tempfile.TemporaryDirectory() as data_dir:
            for label in labels:
                r = run_once(workflow, policy, Path(data_dir), args.steps, args.hz, sets)
                print(
                    f"{name:<14} {policy:<11} {label:<8} {r['predicted'] / MiB:>8.0f}Mi "
                    f"{r['measured'] / MiB:>8.0f}Mi {r['predicted'] / r['measured']:>6.2f}  "
                    f"{r['hz']:>5.0f} Hz  load {r['load']:.1f}  {r['sources']}",
                    flush=True,
                )
                rows.append((label, r))
        return rows

    # Cases run `--jobs` at a time (each its own processes and data dir: a process's RSS is its own, so only
    # the walls and the sampling rate feel the others).
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one_case, jobs))
    print(
        "\n| workflow | policy | first run: predicted / measured | ratio | learned run: predicted / measured | ratio | sampled |"
    )
    print("|---|---|---|---|---|---|---|")
    for (name, _, _, policy), rows in zip(jobs, results, strict=True):
        cells = [
            f"{r['predicted'] / MiB:.0f} / {r['measured'] / MiB:.0f} MiB | {r['predicted'] / r['measured']:.2f}"
            for _, r in rows
        ]
        rate = min(r["hz"] for _, r in rows)
        print(f"| {name} | {policy} | {' | '.join(cells)} | >= {rate:.0f} Hz |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
