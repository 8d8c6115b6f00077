"""Learned working memory: measured once, read back on the next run in place of the formula, and kept
whole when several processes record at the same time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from memory import ComponentSpec, MemoryConfig, MemoryManager, Working
from memory.learned import FILENAME

REPO = Path(__file__).resolve().parent.parent

ACTIVATIONS = 8 * 8192 * 256 * 4  # what the node below holds at once: 64 MiB


def _spec(tmp_path: Path) -> ComponentSpec:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
    save_file(net.state_dict(), tmp_path / "m.safetensors")

    def build() -> torch.nn.Module:
        fresh = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
        fresh.load_state_dict(net.state_dict())
        return fresh

    return ComponentSpec("m#net", "net", "other", build, (tmp_path / "m.safetensors",))


def _run_node(mm: MemoryManager, spec: ComponentSpec) -> int:
    """One node run; returns the working bytes the ledger reserved beside the model while it ran."""
    handle = mm.register(spec)
    with mm.node_scope("n1", "Run"):
        with mm.use(handle, working=Working(formula_bytes=123, shape_key="8x256")) as module:
            reserved = mm.ledger.working[f"use:{handle.key}"]
            held = [module(torch.randn(8192, 256)) for _ in range(8)]  # alive until the use ends
        del held
    return reserved


def test_the_second_run_reserves_the_learned_peak_instead_of_the_formula(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    cfg = MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path)
    with MemoryManager(cfg) as first:
        assert _run_node(first, spec) == 123
        (r1,) = first.report()["reservations"]
    assert r1["source"] == "formula" and r1["reserved_bytes"] == 123 and r1["learned_bytes"] is None
    assert r1["measured_bytes"] >= ACTIVATIONS
    stored = json.loads((tmp_path / FILENAME).read_text())["entries"]
    assert stored["cpu|Run|m#net|8x256"]["working_bytes"] == r1["measured_bytes"]

    with MemoryManager(cfg) as second:  # a new process would read the same file
        assert _run_node(second, spec) == r1["measured_bytes"]
        (r2,) = second.report()["reservations"]
    assert r2["source"] == "learned" and r2["reserved_bytes"] == r1["measured_bytes"]
    # Another shape has not been measured: the formula again.
    with MemoryManager(cfg) as third:
        handle = third.register(spec)
        with third.node_scope("n1", "Run"), third.use(handle, working=Working(77, "1x256")):
            assert third.ledger.working[f"use:{handle.key}"] == 77


def test_a_learned_peak_over_the_budget_falls_back_to_the_formula_instead_of_failing(tmp_path: Path) -> None:
    from memory.learned import LearnedPeaks

    spec = _spec(tmp_path)
    # A peak measured earlier (say, under another policy, with first-use costs) larger than this run's budget.
    LearnedPeaks(tmp_path).record("cpu", "Run", spec.key, "8x256", 512 * 2**20)
    cfg = MemoryConfig(device="cpu", policy="sequential", ram_budget="64MiB", data_dir=tmp_path)
    with MemoryManager(cfg) as mm:
        handle = mm.register(spec)
        with (
            mm.node_scope("n1", "Run"),
            mm.use(handle, working=Working(formula_bytes=123, shape_key="8x256")),
        ):
            assert mm.ledger.working[f"use:{handle.key}"] == 123
        (reservation,) = mm.report()["reservations"]
    assert reservation["source"] == "formula"


# Each worker is its own process with its own LearnedPeaks, as parallel `app --run`s are.
WORKER = """
import sys
from pathlib import Path
from memory.learned import LearnedPeaks

data_dir, worker, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = LearnedPeaks(data_dir)
for i in range(count):
    store.record("cpu", "Node", f"w{worker}#m{i}", "1x1", 1000 + i)
    store.record("cpu", "Shared", "all#m", "1x1", worker * 10 + i)
"""


def test_parallel_processes_lose_no_records(tmp_path: Path) -> None:
    workers, count = 6, 15
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(w), str(count)], env=env)
        for w in range(workers)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * workers
    entries = json.loads((tmp_path / FILENAME).read_text())["entries"]
    own = [k for k in entries if k.startswith("cpu|Node|")]
    assert len(own) == workers * count
    shared = entries["cpu|Shared|all#m|1x1"]
    assert shared["runs"] == workers * count
    assert shared["working_bytes"] == (workers - 1) * 10 + count - 1  # the largest of all
    assert not list(tmp_path.glob("*.tmp"))  # no temp file left behind
