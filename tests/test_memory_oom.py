"""OOM handling as the executor uses it: is_oom, recover_from_oom, retry once, ledger text on failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from memory import BudgetExceeded, ComponentSpec, MemoryConfig, MemoryManager


class Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(128, 128)
        self.other_resident = lambda: False  # set by the test: "is another model taking the memory?"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.other_resident():
            # What CUDA raises when the activations don't fit next to the resident weights.
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.proj(x)


def spec(tmp_path: Path, key: str) -> ComponentSpec:
    path = tmp_path / f"{key}.safetensors"
    torch.manual_seed(0)
    save_file(Wide().state_dict(), path)

    def build() -> Wide:
        module = Wide()
        module.load_state_dict(load_file(path))
        return module

    return ComponentSpec(key, key, "other", build, (path,))


def run_with_retry(mm: MemoryManager, node) -> object:
    """The executor's contract, written out: run, on OOM recover and retry once, then report the ledger."""
    try:
        return node()
    except Exception as exc:
        if not (mm.is_oom(exc) and mm.recover_from_oom(exc)):
            raise
    try:
        return node()
    except Exception as exc:
        if mm.is_oom(exc):
            raise RuntimeError(f"{exc}\n{mm.ledger_text()}") from exc
        raise


def test_injected_oom_recovers_by_evicting_and_tightening_policy(tmp_path: Path) -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        encoder, denoiser = mm.register(spec(tmp_path, "encoder")), mm.register(spec(tmp_path, "denoiser"))
        with mm.use(encoder):
            pass
        assert encoder.location == "device"  # policy none keeps it

        def node() -> torch.Tensor:
            with mm.use(denoiser) as module:
                module.other_resident = lambda: encoder.location == "device"
                return module(torch.ones(1, 128))

        budget = mm.budget
        out = run_with_retry(mm, node)
        assert out.shape == (1, 128)
        assert mm.policy.name == "auto"
        assert encoder.location == "disk"
        # The failed allocation is held back from the budget for the retry and after.
        assert mm.oom_reserve == 2 * 1024**3 and mm.budget == budget - 2 * 1024**3


def test_second_failure_carries_the_ledger(tmp_path: Path) -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path)) as mm:
        denoiser = mm.register(spec(tmp_path, "denoiser"))

        def node() -> None:
            with mm.use(denoiser) as module:
                module.other_resident = lambda: True
                module(torch.ones(1, 128))

        with pytest.raises(RuntimeError) as err:
            run_with_retry(mm, node)
        text = str(err.value)
        assert "out of memory" in text and "denoiser" in text and "budget" in text
        assert mm.policy.name == "sequential"


def test_recover_walks_policies_then_says_no(tmp_path: Path) -> None:
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        walked = []
        while mm.recover_from_oom():
            walked.append(mm.policy.name)
        assert walked == ["auto", "sequential", "stream"]


def test_is_oom_recognises_allocator_failures(tmp_path: Path) -> None:
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path)) as mm:
        assert mm.is_oom(torch.OutOfMemoryError("CUDA out of memory"))
        assert mm.is_oom(BudgetExceeded("x", 2, 1, ""))
        assert mm.is_oom(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
        assert mm.is_oom(
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        )
        assert not mm.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
        assert not mm.is_oom(ValueError("out of memory"))


def test_reserve_working_evicts_then_explains(tmp_path: Path) -> None:
    probe = spec(tmp_path, "a")
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path)) as mm:
        size = mm.register(probe).weight_bytes
    budget = str(size * 3)
    with MemoryManager(MemoryConfig(device="cpu", policy="auto", ram_budget=budget, data_dir=tmp_path)) as mm:
        a, b = mm.register(spec(tmp_path, "a")), mm.register(spec(tmp_path, "b"))
        for h in (a, b):
            with mm.use(h):
                pass
        mm.reserve_working(2 * size, "kv cache")
        assert [a.location, b.location] == ["disk", "device"]  # a was least recently used
        with mm.use(b):
            with pytest.raises(BudgetExceeded) as err:
                mm.reserve_working(2 * size, "vae tiles")
        message = str(err.value)
        assert "vae tiles needs" in message and "working: kv cache" in message and "b " in message
        mm.release_working("kv cache")
        mm.reserve_working(2 * size, "vae tiles")
        mm.reserve_working(size, "vae tiles")  # the same name again replaces, never adds
        assert mm.ledger.working == {"vae tiles": size}
        with mm.node_scope("9", "Decode"):
            mm.reserve_working(size, "forgotten")
        assert "forgotten" not in mm.ledger.working  # a node's leftovers go when the node ends
