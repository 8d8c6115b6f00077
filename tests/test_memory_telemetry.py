"""Telemetry as the GUI and the headless report see it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from memory import (
    ComponentSpec,
    LoadEvent,
    MemoryConfig,
    MemoryManager,
    NodePeak,
    Sample,
    StepEvent,
    UnloadEvent,
    user_data_dir,
)


def test_events_samples_and_report(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file(torch.nn.Linear(64, 64).state_dict(), path)

    def build() -> torch.nn.Module:
        m = torch.nn.Linear(64, 64)
        m.load_state_dict(load_file(path))
        return m

    got: list[object] = []
    sampled = threading.Event()

    def on_record(record: object) -> None:
        got.append(record)
        if isinstance(record, Sample):
            sampled.set()

    cfg = MemoryConfig(device="cpu", policy="sequential", data_dir=tmp_path, sample_hz=50)
    with MemoryManager(cfg) as mm:
        unsubscribe = mm.telemetry.subscribe(on_record)
        handle = mm.register(ComponentSpec("m", "linear", "other", build, (path,)))
        with mm.node_scope("7", "Linear"):
            with mm.use(handle) as module:
                module(torch.ones(1, 64))
            mm.record_step("7", "sampler_step", 0, 1, 0.25)
        assert sampled.wait(timeout=10)
        unsubscribe()
        count = len(got)
        mm.record_step("7", "sampler_step", 1, 1, 0.25)
        assert len([r for r in got[count:] if not isinstance(r, Sample)]) == 0
        report = json.loads(json.dumps(mm.report()))
    kinds = [type(r) for r in got if not isinstance(r, Sample)]
    assert kinds == [LoadEvent, UnloadEvent, StepEvent, NodePeak]
    load = next(r for r in got if isinstance(r, LoadEvent))
    assert (load.component, load.nbytes, load.source, load.target) == (
        "linear",
        64 * 65 * 4,
        "disk",
        "device",
    )
    assert load.t >= 0 and load.seconds >= 0
    assert report["device"] == "cpu" and report["policy"] == "sequential"
    assert report["loads"][0]["nbytes"] == 64 * 65 * 4 and report["unloads"][0]["component"] == "linear"
    assert [s["index"] for s in report["steps"]] == [0, 1]
    assert report["node_peaks"][0]["node_type"] == "Linear"
    assert report["timeline"] and {"t", "host_rss", "budget"} <= set(report["timeline"][0])
    assert not mm.telemetry.sampling  # close() stopped the thread


def test_user_data_dir_reads_env_at_call_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "a"))
    assert user_data_dir() == tmp_path / "a"
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "b"))
    assert user_data_dir() == tmp_path / "b"
    monkeypatch.delenv("NODELOOM_DATA_DIR")
    assert "nodeloom" in str(user_data_dir()).lower()
