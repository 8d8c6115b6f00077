"""Load progress is the memory manager's own telemetry: every load reports its bytes with the ledger's total,
whoever registered the model and whether or not a loader asked, and a listener that raises stops the load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from memory import ComponentSpec, LoadProgress, MemoryConfig, MemoryManager
from memory.weights import SafetensorsSource


class Stop(Exception):
    pass


def _linear_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    save_file(torch.nn.Linear(64, 64).state_dict(), path)
    return path


def test_a_whole_build_reports_zero_then_the_ledgers_bytes_and_keeps_no_record(tmp_path: Path) -> None:
    path = _linear_file(tmp_path)

    def build() -> torch.nn.Module:
        m = torch.nn.Linear(64, 64)
        m.load_state_dict(load_file(path))
        return m

    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        seen: list[LoadProgress] = []
        mm.telemetry.subscribe_progress(seen.append)
        handle = mm.register(ComponentSpec("m", "linear", "other", build, (path,)))
        assert not seen  # registering reads nothing
        with mm.use(handle):
            pass
        assert [(e.component, e.done, e.total) for e in seen] == [
            ("linear", 0, handle.weight_bytes),
            ("linear", handle.weight_bytes, handle.weight_bytes),
        ]
        assert not mm.telemetry.events(LoadProgress)  # transient: the report and the plots never see them


def test_a_listener_that_raises_stops_a_tensor_by_tensor_load(tmp_path: Path) -> None:
    path = _linear_file(tmp_path)

    def empty() -> torch.nn.Module:
        with torch.device("meta"):
            return torch.nn.Linear(64, 64)

    spec = ComponentSpec("m", "linear", "other", empty, source=SafetensorsSource((path,)))
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path)) as mm:
        handle = mm.register(spec)

        def cancel(event: LoadProgress) -> None:
            raise Stop  # as a cancelled run's node context does

        unsubscribe = mm.telemetry.subscribe_progress(cancel)
        with pytest.raises(Stop), mm.use(handle):
            pass
        assert handle.locks == 0 and handle.device_bytes == 0
        unsubscribe()
        with mm.use(handle) as module:  # nobody listening: the load runs through
            assert module.weight.shape == (64, 64) and not module.weight.is_meta
