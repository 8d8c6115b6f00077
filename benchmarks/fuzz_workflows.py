"""1,000 mutated workflow files (and pickles under every disguise) through Nodeloom's validation.

Usage:
    python benchmarks/fuzz_workflows.py [--count 1000] [--inputs 200] [--seed 0] [--run-valid 10] [--timeout 60]

Every mutant of every shipped workflow (tests/fuzz_mutations.py) goes through the code path of
`app --run` up to the start of the run (read, parse, validate), in this process. Printed per mutation:
files, how many were refused (exit 2) or would run (exit 0), tracebacks, the longest message and the
slowest file. `--run-valid N` then runs N of the files that validated with `app --run` in a subprocess
under `--timeout` seconds each (a valid mutant runs the real model), reporting exit codes and
stderr sizes. Then `--inputs N` hostile inputs that are not workflow files (sweep flags whose grid is
huge, GGUF headers declaring arrays, strings or tensors the file cannot hold) go through `check_input`,
with the process's RSS sampled at 50 Hz from a thread. Last, pickle payloads saved under every disguise are handed to every loader without
--allow-pickle, counting how many ran.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz_mutations import check_file, check_input, generate_input_mutants, generate_mutants  # noqa: E402

DISGUISES = (
    "model.SAFETENSORS",
    "model.Safetensors",
    "model.gguf",
    "model.model",
    "model.th",
    "model.pickle",
    "model.safetensors.bak",
    "model",
)


def fuzz(count: int, seed: int, work: Path) -> list[Path]:
    from nodes.registry import default_registry

    registry = default_registry(entry_point_packs=False)
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    longest: dict[str, int] = collections.defaultdict(int)
    slowest: dict[str, float] = collections.defaultdict(float)
    tracebacks: list[str] = []
    accepted_bad: list[str] = []
    valid: list[Path] = []
    started = time.perf_counter()
    for mutant in generate_mutants(count, seed):
        path = work / f"{mutant.name}{mutant.suffix}"
        path.write_bytes(mutant.data)
        t0 = time.perf_counter()
        checked = check_file(path, registry)
        seconds = time.perf_counter() - t0
        kind = mutant.mutation
        rows[kind]["files"] += 1
        rows[kind][f"exit {checked.exit_code}"] += 1
        slowest[kind] = max(slowest[kind], seconds)
        if checked.error is not None:
            rows[kind]["traceback"] += 1
            tracebacks.append(f"{mutant.name}: {checked.message[:200]}")
        if checked.exit_code == 2:
            longest[kind] = max(longest[kind], len(checked.message.encode()))
            if path.name not in checked.message:
                rows[kind]["unnamed"] += 1
        if checked.exit_code == 0:
            if mutant.must_fail:
                accepted_bad.append(mutant.name)
            valid.append(path)
        else:
            path.unlink()
    total = time.perf_counter() - started

    print(f"{count} mutated files from {seed=}, validated in-process in {total:.1f} s\n")
    header = f"{'mutation':<18} {'files':>5} {'exit 2':>6} {'exit 0':>6} {'tracebk':>7} {'max msg B':>9} {'max s':>6}"
    print(header)
    print("-" * len(header))
    totals: collections.Counter = collections.Counter()
    for kind in sorted(rows):
        r = rows[kind]
        totals.update(r)
        print(
            f"{kind:<18} {r['files']:>5} {r['exit 2']:>6} {r['exit 0']:>6} {r['traceback']:>7} "
            f"{longest[kind]:>9,} {slowest[kind]:>6.2f}"
        )
    print("-" * len(header))
    print(
        f"{'all':<18} {totals['files']:>5} {totals['exit 2']:>6} {totals['exit 0']:>6} {totals['traceback']:>7} "
        f"{max(longest.values(), default=0):>9,} {max(slowest.values(), default=0):>6.2f}"
    )
    print(f"\nrefusals not naming the file: {totals['unnamed']}")
    print(f"files that must be refused but validated: {len(accepted_bad)} {accepted_bad[:5]}")
    for line in tracebacks[:20]:
        print(f"TRACEBACK {line}")
    return valid


def inputs(count: int, seed: int, work: Path) -> None:
    """Hostile sweep flags and GGUF headers: each must be refused (exit 2 or 1) without a traceback,
    quickly and without the process growing (RSS sampled at 50 Hz: a refusal that materialises a
    10^10-job grid or a 2^60-item array would show here before it finished)."""
    import threading

    import psutil

    from nodes.registry import default_registry

    registry = default_registry(entry_point_packs=False)
    proc = psutil.Process()
    baseline = proc.memory_info().rss
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], proc.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    slowest: dict[str, float] = collections.defaultdict(float)
    tracebacks: list[str] = []
    folder = work / "inputs"
    folder.mkdir(exist_ok=True)
    try:
        for mutant in generate_input_mutants(count, seed):
            t0 = time.perf_counter()
            checked = check_input(mutant, folder, registry)
            slowest[mutant.mutation] = max(slowest[mutant.mutation], time.perf_counter() - t0)
            rows[mutant.mutation]["files"] += 1
            rows[mutant.mutation][f"exit {checked.exit_code}"] += 1
            if checked.error is not None:
                rows[mutant.mutation]["traceback"] += 1
                tracebacks.append(f"{mutant.name}: {checked.message[:200]}")
    finally:
        done.set()
        sampler.join()
    print(f"\n{count} hostile inputs from {seed=} (sweep grids, GGUF headers)\n")
    header = (
        f"{'input':<18} {'inputs':>6} {'exit 2':>6} {'exit 1':>6} {'exit 0':>6} {'tracebk':>7} {'max s':>6}"
    )
    print(header)
    print("-" * len(header))
    for kind in sorted(rows):
        r = rows[kind]
        print(
            f"{kind:<18} {r['files']:>6} {r['exit 2']:>6} {r['exit 1']:>6} {r['exit 0']:>6} {r['traceback']:>7} "
            f"{slowest[kind]:>6.2f}"
        )
    print(f"peak RSS above the start of this pass: {(peak[0] - baseline) / 2**20:.0f} MiB")
    for line in tracebacks[:20]:
        print(f"TRACEBACK {line}")


def run_valid(valid: list[Path], limit: int, timeout: float, work: Path) -> None:
    if not valid or limit <= 0:
        return
    # Convert the built-in LLM once here, so each run measures the workflow rather than a first conversion.
    from pipelines.llm.gguf_cache import ensure_gguf_converted
    from pipelines.paths import resolve_model_path

    ensure_gguf_converted(resolve_model_path("builtin:smollm2"))
    step = max(1, len(valid) // limit)
    chosen = valid[::step][:limit]
    print(
        f"\nrunning {len(chosen)} of the {len(valid)} files that validated (app --run, {timeout:.0f} s each)"
    )
    codes: collections.Counter = collections.Counter()
    over, max_err, traces = 0, 0, 0
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for path in chosen:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "app.main", "--run", str(path), "--out", str(work / "out"), "--quiet"],
                capture_output=True,
                timeout=timeout,
                env=env,
                cwd=REPO,
            )
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, err, over = "timeout", exc.stderr or b"", over + 1
        codes[code] += 1
        max_err = max(max_err, len(err))
        traces += b"Traceback" in err
        print(f"  {path.name:<40} exit {code} in {time.perf_counter() - t0:5.1f} s, stderr {len(err):,} B")
    print(
        f"exit codes {dict(codes)}; over {timeout:.0f} s: {over}; tracebacks: {traces}; max stderr {max_err:,} B"
    )


def pickles(work: Path) -> None:
    import pickle

    import torch

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.loading import load_component_file, load_model
    from pipelines.diffusion.single_file import CONFIG_DIRS
    from pipelines.llm.hf_loader import prepare_llm_files

    marker = work / "PWNED"

    class Payload:
        def __reduce__(self):  # noqa: ANN204
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    loaders = {
        "load_model": lambda mm, p: load_model(mm, str(p), kind="single_file"),
        "load_component_file": lambda mm, p: load_component_file(
            mm, p, component="vae", config_dir=CONFIG_DIRS["sd1"], family=FAMILIES["sd"]
        ),
        "prepare_llm_files": lambda mm, p: prepare_llm_files(p),
    }
    tries = executions = refused = 0
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    try:
        for name in DISGUISES:
            for zipped in (True, False):
                path = work / "pickles" / ("zip" if zipped else "raw") / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if zipped:
                    torch.save({"x": Payload()}, path)
                else:
                    path.write_bytes(pickle.dumps({"x": Payload()}, protocol=4))
                for load in loaders.values():
                    tries += 1
                    try:
                        load(mm, path)
                    except Exception as exc:  # noqa: BLE001
                        refused += "pickle" in str(exc)
                    if marker.exists():
                        executions += 1
                        marker.unlink()
    finally:
        mm.close()
    print(
        f"\npickle payloads: {tries} loads ({len(DISGUISES)} disguises x 2 formats x {len(loaders)} loaders)"
    )
    print(f"executed without --allow-pickle: {executions}; refused naming pickles: {refused}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--inputs", type=int, default=200, help="hostile sweep flags and GGUF headers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-valid", type=int, default=10, help="run this many of the files that validated")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeloom-fuzz-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("NODELOOM_DATA_DIR", str(work / "data"))
        valid = fuzz(args.count, args.seed, work)
        inputs(args.inputs, args.seed, work)
        run_valid(valid, args.run_valid, args.timeout, work)
        pickles(work)


if __name__ == "__main__":
    main()
