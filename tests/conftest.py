"""Shared test set-up: an isolated user data dir, no network, offscreen Qt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Set before anything imports Qt or the hub clients.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# As in app/main.py: sleeping, not spinning, OpenMP workers (subprocess tests inherit it too).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test session gets its own user data dir: demo models, caches and learned peaks go there."""
    path = tmp_path_factory.mktemp("nodeloom-data")
    os.environ["NODELOOM_DATA_DIR"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    """Every test runs on one torch thread: the models are tiny, and on a shared 2-core machine OpenMP
    threads waiting for each other made a 2x64 linear take 15 ms (10x slower than one thread)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def registry():
    from nodes.registry import default_registry

    return default_registry(entry_point_packs=False)


@pytest.fixture
def cpu_memory(tmp_path: Path):
    """A CPU MemoryManager (auto policy, its own data dir), closed after the test."""
    from memory import MemoryConfig, MemoryManager

    with MemoryManager(MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path / "memory-data")) as mm:
        yield mm


@pytest.fixture(autouse=True)
def _close_leftover_memory_managers(monkeypatch: pytest.MonkeyPatch):
    """Close every MemoryManager a test opened and left open: each runs a sampler thread, and dozens of
    leftover samplers slow every later test on a small machine."""
    from memory.manager import MemoryManager

    opened: list[MemoryManager] = []
    original = MemoryManager.__init__

    def tracking_init(self: MemoryManager, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(MemoryManager, "__init__", tracking_init)
    yield
    for mm in opened:
        if mm._scope is None and not any(h.is_locked for h in mm.ledger.handles.values()):
            mm.close()
        else:  # still in use by a worker thread the test left behind: stop its sampler only
            mm.telemetry.stop_sampler()
