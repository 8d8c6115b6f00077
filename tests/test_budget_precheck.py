"""A budget too small for a workflow's models is refused before any model loads, from headers alone.

The bound is a lower one (`memory.fit`): a streamable model needs its weights outside the blocks plus its
largest block, anything else all its weights, so a budget that a streaming run can live with still runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from app.main import main
from memory import ComponentSpec, MemoryConfig, MemoryManager
from memory.fit import least_resident_bytes

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
FAST = ["--set", "sampler.steps=1", "--threads", "1", "--quiet"]


def test_a_tiny_ram_budget_is_refused_before_any_load_and_the_report_is_written(
    tmp_path: Path, capsys
) -> None:
    report = tmp_path / "report.json"
    started = time.monotonic()
    code = main(
        [
            "--run",
            str(TXT2IMG),
            "--ram-budget",
            "1MiB",
            "--out",
            str(tmp_path / "out"),
            "--report",
            str(report),
            *FAST,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert time.monotonic() - started < 60  # imports only: the refusal comes before the first load
    # The budget is the run's RSS: the process alone holds more than 1 MiB, and the message says so.
    assert err.startswith(
        "run failed: node 'load' (LoadDiffusionModel) failed: the cpu memory budget (1.00 MiB; "
        "the process itself holds "
    )
    assert "nothing was loaded" in err and "MiB (its weights" in err and len(err.splitlines()) == 1
    data = json.loads(report.read_text())
    assert data["ok"] is False and data["memory"]["loads"] == []
    assert data["runs"][0]["failed_node"] == "load"
    assert data["runs"][0]["nodes"]["load"]["error"]["type"] == "BudgetExceeded"
    assert not list((tmp_path / "out").glob("*.png"))


def test_a_budget_below_the_model_but_enough_to_stream_it_still_runs(tmp_path: Path, capsys) -> None:
    # The shapes UNet holds 16.4 MiB of weights; streamed, 5.2 MiB above the process's own RSS is enough
    # (the plan's least budget for `stream`, which counts the process as the run does: `--ram-budget` on
    # the CPU is the run's RSS). 8 MiB above that least budget leaves room for the RSS to drift between the
    # plan and the sampler, and is still below what holding every model needs. A first run imports what the
    # plan does not (the model classes' modules, ~17 MiB of RSS measured): after it, the plan's baseline is
    # the run's.
    assert main(["--run", str(TXT2IMG), "--device", "cpu", "--out", str(tmp_path / "warm"), *FAST]) == 0
    assert main(["plan", str(TXT2IMG), "--device", "cpu", "--ram-budget", "2GiB", "--json"]) == 0
    least = {n: row["least_budget"] for n, row in json.loads(capsys.readouterr().out)["policies"].items()}
    budget = least["stream"] + 8 * 2**20
    assert budget < least["none"]
    argv = [
        "--run",
        str(TXT2IMG),
        "--device",
        "cpu",
        "--offload",
        "stream",
        "--ram-budget",
        f"{budget}B",
        "--out",
        str(tmp_path),
        *FAST,
    ]
    assert main(argv) == 0
    assert list(tmp_path.glob("*.png"))


@pytest.fixture
def manager():
    with MemoryManager(MemoryConfig(device="cpu", policy="stream", ram_budget="1GiB")) as mm:
        yield mm


def _spec(tmp_path: Path, blocks: tuple[str, ...]) -> ComponentSpec:
    path = tmp_path / "m.safetensors"
    save_file(
        {
            "embed.weight": torch.zeros(10, 10),  # 400 bytes outside the blocks
            "layers.0.weight": torch.zeros(10, 20),  # 800 bytes
            "layers.1.weight": torch.zeros(10, 30),  # 1200 bytes: the largest block
            "layers.10.weight": torch.zeros(10, 5),  # 200 bytes (".10." is its own block, not ".1.")
        },
        str(path),
    )
    return ComponentSpec(
        key=f"m{blocks}", name="m", kind="denoiser", build=torch.nn.Module, files=(path,), blocks=blocks
    )


def test_the_least_resident_bytes_count_the_largest_block_only_when_streamable(
    manager, tmp_path: Path
) -> None:
    handle = manager.register(_spec(tmp_path, ("layers",)))
    assert handle.weight_bytes == 2600
    assert least_resident_bytes(handle, can_stream=True) == 400 + 1200
    assert least_resident_bytes(handle, can_stream=False) == 2600
    plain = manager.register(_spec(tmp_path, ()))
    assert least_resident_bytes(plain, can_stream=False) == 2600


def test_the_manager_names_the_model_that_cannot_fit(tmp_path: Path) -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="none", ram_budget="1000")) as mm:
        handle = mm.register(_spec(tmp_path, ()))
        problem = mm.budget_problem([handle.key])
    assert problem is not None and "too small for m" in problem and "2.54 KiB" in problem
