"""On the CPU the RAM budget is the RSS a run may reach: the process's own RSS (interpreter, torch, libraries;
the "baseline") is taken off it before blocks are kept resident, in the run's placer and in `app plan`'s
simulation alike; an accelerator's budget (its own memory) is left as it is.

The placer and plan tests inject the baseline figure (`Ledger(..., baseline=)`, `simulate(..., baseline=)`),
so their block counts are exact; the slow test measures a real streamed run's RSS against its budget.
"""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import save_file

from memory import ComponentSpec, MemoryConfig, MemoryManager
from memory.errors import BudgetExceeded
from memory.ledger import Ledger, ModelHandle
from memory.placement import Placer
from memory.plan import PlannedUse, PlanStep, simulate
from memory.policy import policy_named
from memory.telemetry import Telemetry
from memory.weights import SafetensorsSource

CPU = torch.device("cpu")
MiB = 2**20


class Stack(torch.nn.Module):
    """An embedding outside the blocks and `depth` equal square blocks: one Linear each."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(width, width, bias=False)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width, bias=False) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _write(folder: Path, width: int, depth: int) -> Path:
    """The stack's weights (zeros: only their bytes matter here), written tensor by tensor."""
    path = folder / "stack.safetensors"
    tensors = {"embed.weight": torch.zeros(width, width)}
    tensors |= {f"layers.{i}.weight": torch.zeros(width, width) for i in range(depth)}
    save_file(tensors, str(path))
    return path


def _spec(path: Path, width: int, depth: int) -> ComponentSpec:
    def build() -> torch.nn.Module:
        with torch.device("meta"):  # the manager fills it from `source`: only the resident part is read
            return Stack(width, depth).eval()

    return ComponentSpec(
        "stack",
        "stack",
        "denoiser",
        build,
        (path,),
        torch.float32,
        ("layers",),
        source=SafetensorsSource([path]),
    )


WIDTH, DEPTH = 64, 12
BLOCK = WIDTH * WIDTH * 4  # 16 KiB per block, and the same outside them
WORKING = 1000


@pytest.fixture
def stack(tmp_path: Path) -> ComponentSpec:
    return _spec(_write(tmp_path, WIDTH, DEPTH), WIDTH, DEPTH)


def _resident_blocks(spec: ComponentSpec, budget: int, baseline: int) -> tuple[int, Ledger]:
    ledger = Ledger(CPU, budget, None, baseline)
    handle = ModelHandle(spec, spec.source.nbytes(torch.float32))
    ledger.handles[spec.key] = handle
    Placer(ledger, CPU, Telemetry()).place(handle, WORKING, policy_named("stream"))
    return sum(b.resident for b in handle.stream.blocks), ledger


# Room for the weights outside the blocks, the one-block window, the working memory and 5.5 blocks: 5 resident.
BUDGET = BLOCK + BLOCK + WORKING + 5 * BLOCK + BLOCK // 2


@pytest.mark.parametrize(("baseline", "resident"), [(0, 5), (BLOCK, 4), (2 * BLOCK + BLOCK // 4, 3)])
def test_the_cpu_placer_keeps_the_baselines_worth_of_blocks_fewer(
    stack: ComponentSpec, baseline: int, resident: int
) -> None:
    kept, ledger = _resident_blocks(stack, BUDGET, baseline)
    assert kept == resident
    # What a user checks: the process's RSS (its baseline + what the ledger holds) stays within the RAM budget.
    handle = ledger.handles["stack"]
    assert baseline + handle.device_bytes + handle.stream.window_bytes() + WORKING <= BUDGET


def test_the_plan_keeps_the_same_blocks_as_the_run(stack: ComponentSpec) -> None:
    steps = [PlanStep("sampler", "KSampler", (PlannedUse("stack", WORKING),))]
    for baseline in (0, BLOCK, 2 * BLOCK + BLOCK // 4):
        _, ledger = _resident_blocks(stack, BUDGET, baseline)
        components = [(stack, stack.source.nbytes(torch.float32))]
        sim = simulate(components, steps, policy_named("stream"), CPU, BUDGET, None, baseline=baseline)
        assert sim.fits and sim.steps[0].streamed == ["stack"]
        assert sim.steps[0].resident == {"stack": ledger.handles["stack"].device_bytes}


def test_a_budget_the_baseline_leaves_too_little_of_says_what_the_process_holds(stack: ComponentSpec) -> None:
    # Without the baseline the budget streams the stack; with 1 MiB of it held by the process, nothing fits.
    budget = 2 * MiB
    assert _resident_blocks(stack, budget, 0)[0] == DEPTH
    with pytest.raises(BudgetExceeded) as failed:
        _resident_blocks(stack, budget, budget - BLOCK)
    first = str(failed.value).splitlines()[0]
    assert "the process itself holds 1.98 MiB of the 2.00 MiB budget" in first, first
    components = [(stack, stack.source.nbytes(torch.float32))]
    steps = [PlanStep("sampler", "KSampler", (PlannedUse("stack", WORKING),))]
    sim = simulate(components, steps, policy_named("stream"), CPU, budget, None, baseline=budget - BLOCK)
    assert not sim.fits and "the process itself holds 1.98 MiB" in (sim.problem or "")


def test_an_accelerator_budget_does_not_count_the_process(stack: ComponentSpec) -> None:
    # The device's own memory: the host process's RSS is not in it (the host copies have their own budget).
    ledger = Ledger(torch.device("cuda", 0), BUDGET, 4 * BUDGET, baseline=BLOCK)
    assert (
        ledger.models_budget() == BUDGET and ledger.device_free() == BUDGET and ledger.baseline_note() == ""
    )
    assert Ledger(CPU, BUDGET, None, baseline=BLOCK).models_budget() == BUDGET - BLOCK


def test_the_manager_measures_the_baseline_only_when_the_config_counts_it(stack: ComponentSpec) -> None:
    counting = MemoryConfig(device="cpu", policy="stream", ram_budget="64GiB", count_process_rss=True)
    with MemoryManager(counting) as mm:
        handle = mm.register(stack)
        with mm.use(handle, working_bytes=WORKING):
            pass
        # The interpreter and torch alone hold far more than 16 MiB; the figure is RSS less the ledger's bytes.
        assert mm.ledger.baseline > 16 * MiB
        assert mm.ledger.baseline <= mm.process_peak_rss  # RSS less the ledger's bytes, at the use
        assert mm.report()["budget"]["process_baseline"] == mm.ledger.baseline
    with MemoryManager(MemoryConfig(device="cpu", policy="stream", ram_budget="64GiB")) as mm:
        with mm.use(mm.register(stack), working_bytes=WORKING):
            pass
        assert mm.ledger.baseline == 0 and mm.ledger.models_budget() == mm.budget


def test_a_share_of_the_available_ram_lies_above_what_the_process_held_at_start() -> None:
    # 1000 B available beside a process holding 300 B: half of that RAM is an RSS of 300 + 500.
    counting = MemoryConfig(device="cpu", ram_budget="0.5", count_process_rss=True)
    assert counting.budgets("cpu", 1000, 0, process_rss=300).device == 800
    assert MemoryConfig(device="cpu", count_process_rss=True).budgets("cpu", 1000, 0, 300).device == 1300
    sized = MemoryConfig(device="cpu", ram_budget="800B", count_process_rss=True)
    assert sized.budgets("cpu", 1000, 0, process_rss=300).device == 800  # a size is the RSS itself
    assert MemoryConfig(device="cpu", ram_budget="0.5").budgets("cpu", 1000, 0, 300).device == 500


class _PeakRss:
    """The process's RSS, sampled with psutil from a thread at 50 Hz (>= 20: a block's read lasts longer)."""

    def __init__(self) -> None:
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        proc = psutil.Process()
        while not self._done.is_set():
            self.peak = max(self.peak, proc.memory_info().rss)
            self._done.wait(0.02)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


@pytest.mark.slow  # writes a 1.6 GiB file and streams it twice (~10-30 s)
def test_a_streamed_cpu_run_keeps_its_rss_within_a_budget_smaller_than_the_process_plus_the_model(
    tmp_path: Path,
) -> None:
    width, depth = 4096, 24  # 64 MiB per block, 1.56 GiB in all
    block = width * width * 4
    path = _write(tmp_path, width, depth)
    spec = _spec(path, width, depth)
    x = torch.randn(1, width)
    rss = psutil.Process().memory_info().rss
    # Room beside the process for the embedding, the window and 8.5 blocks: the half block absorbs what the
    # RSS does beside the ledger (the file pages of the block being read, torch's first-call allocations).
    budget = rss + block + block + 8 * block + block // 2
    config = MemoryConfig(
        device="cpu",
        policy="stream",
        ram_budget=f"{budget}B",
        count_process_rss=True,
        data_dir=tmp_path / "d",
    )
    with MemoryManager(config) as mm, _PeakRss() as sampled:
        handle = mm.register(spec)
        for _ in range(2):  # a second step: every streamed block is read again
            with torch.no_grad(), mm.use(handle, working_bytes=4 * width * 4) as module:
                module(x)
                kept = sum(b.resident for b in handle.stream.blocks)  # `stream` unloads after use
    assert 0 < kept < depth  # it streamed, and kept some blocks
    assert sampled.peak <= budget, f"peak RSS {sampled.peak / MiB:.0f} MiB, budget {budget / MiB:.0f} MiB"
