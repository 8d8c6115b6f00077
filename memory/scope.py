"""NodeScope: measures one node run's peak memory and the working memory it implies.

May import: stdlib, torch, memory.devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from memory.devices import peak_rss, read_host, reset_peak_rss

if TYPE_CHECKING:
    from memory.manager import MemoryManager


class NodeScope:
    """Baseline at start, peak at finish. Working = peak - baseline - growth of resident weights in between.

    CUDA: allocator counters (exact for this process). CPU: the kernel's VmHWM reset at start (exact); where
    it can't be reset, the largest sampled RSS during the scope (may miss short spikes). MPS has no peak
    counter: the allocation at the end is used, which under-reads; learned values there are a floor.
    """

    def __init__(self, manager: MemoryManager, node_id: str, node_type: str, shape_key: str) -> None:
        self.manager = manager
        self.node_id, self.node_type, self.shape_key = node_id, node_type, shape_key
        self.models: set[str] = set()
        self.reserved: set[str] = set()  # reserve_working names taken during the scope
        self.weights_start = self.weights_max = manager.ledger.device_weights()
        self.device = manager.device
        self.t0 = manager.telemetry.now()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.exact = True
        elif self.device.type == "mps":
            self.baseline = torch.mps.current_allocated_memory()
            self.exact = False
        else:
            # Keep the whole-process peak before resetting the kernel's mark for this node.
            manager.process_peak_rss = max(manager.process_peak_rss, peak_rss() or 0)
            self.baseline = read_host().rss
            self.exact = reset_peak_rss()

    def saw(self, key: str, device_weights: int) -> None:
        self.models.add(key)
        self.weights_max = max(self.weights_max, device_weights)

    def finish(self) -> tuple[int, int, int]:
        """(peak, baseline, working) in bytes."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        elif self.device.type == "mps":
            peak = torch.mps.current_allocated_memory()
        else:
            rss = read_host().rss
            if self.exact:
                peak = max(peak_rss() or rss, rss)
            else:
                sampled = [s.host_rss for s in self.manager.telemetry.samples() if s.t >= self.t0]
                peak = max([rss, *sampled])
            self.manager.process_peak_rss = max(self.manager.process_peak_rss, peak)
        self.weights_max = max(self.weights_max, self.manager.ledger.device_weights())
        working = max(0, peak - self.baseline - (self.weights_max - self.weights_start))
        return peak, self.baseline, working
