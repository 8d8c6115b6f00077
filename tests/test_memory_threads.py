"""Where threads meet: the sampler thread and the compute thread share only the peak tracker and the
telemetry hub, both lock-guarded; starting the sampler from several threads starts one."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import torch
from safetensors.torch import save_file

from memory import ComponentSpec, MemoryConfig, MemoryManager, Working
from memory.peaks import PeakTracker

SAMPLER = "nodeloom-memory-sampler"


def _samplers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SAMPLER]


def test_peak_windows_see_every_value_observed_from_other_threads() -> None:
    tracker = PeakTracker(0)
    stop = threading.Event()
    biggest = [0] * 4

    def hammer(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            value = rng.randrange(1, 10**9)
            biggest[i] = max(biggest[i], value)
            tracker.observe(value)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(2000):
            outer = tracker.open(5)
            inner = tracker.open(3)
            tracker.observe(2 * 10**9)  # seen by both windows, whatever the others do meanwhile
            assert tracker.close(inner, 1).peak == 2 * 10**9
            closed = tracker.close(outer, 1)
            assert closed.start == 5 and closed.peak == 2 * 10**9
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert tracker.overall == 2 * 10**9 >= max(biggest)


def test_sampler_and_compute_thread_hammered_together(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(64, 64)
    save_file(net.state_dict(), tmp_path / "m.safetensors")

    def build() -> torch.nn.Module:
        fresh = torch.nn.Linear(64, 64)
        fresh.load_state_dict(net.state_dict())
        return fresh

    spec = ComponentSpec("t#lin", "lin", "other", build, (tmp_path / "m.safetensors",))
    cfg = MemoryConfig(device="cpu", policy="sequential", data_dir=tmp_path, sample_hz=2000)
    errors: list[BaseException] = []
    stop = threading.Event()
    others = set(_samplers())  # managers left open elsewhere in the process have their own samplers
    with MemoryManager(cfg) as mm:
        handle = mm.register(spec)

        def toggler() -> None:  # the GUI thread starting and stopping the sampler while nodes run
            try:
                while not stop.is_set():
                    mm.start_sampler()
                    alive = set(_samplers()) - others
                    assert len(alive) <= 1, f"{len(alive)} sampler threads"
                    mm.telemetry.stop_sampler()
            except BaseException as exc:  # reported to the main thread
                errors.append(exc)

        starters = [threading.Thread(target=toggler) for _ in range(3)]
        for t in starters:
            t.start()
        try:
            for i in range(60):
                with mm.node_scope(f"n{i}", "Lin"), mm.use(handle, working=Working(1024, "4x64")) as module:
                    module(torch.randn(4, 64))
        finally:
            stop.set()
            for t in starters:
                t.join()
        assert not errors, errors
        mm.start_sampler()
        report = mm.report()
    assert len(report["node_peaks"]) == 60 and len(report["reservations"]) == 60
    assert all(p["peak_bytes"] >= p["baseline_bytes"] > 0 for p in report["node_peaks"])
    peaks = [p["peak_bytes"] for p in report["node_peaks"]] + [s["host_rss"] for s in report["timeline"]]
    assert report["process_peak_rss"] >= max(peaks)
    assert not set(_samplers()) - others  # close() stopped it
