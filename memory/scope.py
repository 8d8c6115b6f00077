"""Measuring memory on the compute thread: `Meter` (readings and peak windows) and `NodeScope` (one node run).

Lives here: `Meter`, `NodeScope`, `NodeMeasurement`, `working_from`. May import: stdlib, torch,
memory.devices, memory.peaks.

Peaks come from our own readings: the sampler thread observes host RSS at `sample_hz` and the compute thread
reads at every window boundary (CUDA: the allocator's peak since the last boundary, then reset). The
kernel's high-water mark is read but never reset, so outside tools keep seeing the true process peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memory.devices import read_host
from memory.peaks import PeakTracker, Window


class Meter:
    """The device's memory as one number per reading, and nested peak windows over it.

    CPU: host RSS (the sampler feeds the same tracker, so short spikes between boundaries are seen at the
    sampling rate). CUDA: `memory_allocated`, with `max_memory_allocated` folded in at each boundary (exact).
    MPS: the current allocation (no peak counter: peaks there are a floor).
    Owned by the compute thread; only `host.observe` is called from the sampler.
    """

    def __init__(self, device: torch.device, host: PeakTracker) -> None:
        self.device = device
        self.host = host
        self.peaks = host if device.type == "cpu" else PeakTracker()

    def read(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peaks.observe(torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        if self.device.type == "mps":
            return torch.mps.current_allocated_memory()
        return read_host().rss

    def open(self) -> Window:
        return self.peaks.open(self.read())

    def close(self, window: Window) -> Window:
        return self.peaks.close(window, self.read())


@dataclass(frozen=True)
class NodeMeasurement:
    """What one node run took: peak and baseline readings and the working memory they imply (bytes)."""

    node_id: str
    node_type: str
    models: tuple[str, ...]
    peak: int
    baseline: int
    working: int


def working_from(window: Window, weights_before: int, weights_after: int, transient: int = 0) -> int:
    """Working memory in a window: the rise of the reading minus the change in resident weights (and minus
    `transient` bytes the caller accounts for separately, e.g. a streaming window)."""
    return max(0, window.peak - window.start - (weights_after - weights_before) - transient)


class NodeScope:
    """One node run: opens a peak window at start; `finish` closes it and returns the measurement.

    `next_users` are the model keys the next node to run will use (from the executor's planned order): a
    policy that unloads after use keeps those models across the boundary.
    """

    def __init__(
        self,
        node_id: str,
        node_type: str,
        meter: Meter,
        weights_now: int,
        next_users: frozenset[str] = frozenset(),
    ) -> None:
        self.node_id, self.node_type = node_id, node_type
        self.next_users = next_users
        self.models: set[str] = set()
        self.reserved: set[str] = set()  # reserve_working names taken during the scope
        # (model learned key, shape key) of the node's first use with declared working memory: the key its
        # whole peak is learned under (`memory.learned.node_shape_key`)
        self.first_use: tuple[str, str] | None = None
        self.first_use_peak: int | None = None  # the reading's peak within that use's window
        self.weights_start = self.weights_max = weights_now
        self._meter = meter
        self._window = meter.open()

    def saw(self, key: str, device_weights: int) -> None:
        self.models.add(key)
        self.weights_max = max(self.weights_max, device_weights)

    def finish(self, weights_now: int) -> NodeMeasurement:
        window = self._meter.close(self._window)
        self.weights_max = max(self.weights_max, weights_now)
        working = max(0, window.peak - window.start - (self.weights_max - self.weights_start))
        return NodeMeasurement(
            self.node_id, self.node_type, tuple(sorted(self.models)), window.peak, window.start, working
        )
