"""Load progress: the bytes of a model read into memory, reported as `LoadProgress` telemetry while it loads.

Lives here: `ReportingSource`, `REPORT_PARTS` (the placer reports whole builds itself). May import: stdlib, torch, memory.telemetry, memory.weights.

This is the one owner of load progress. The manager reports every load itself: a component filled tensor by
tensor from its `WeightSource` (wrapped here when it is registered), a whole-module build (0 before, the
ledger's bytes after), and a builder that reads its own weights (`MemoryManager.load_progress`). Loaders take
no progress callback; whoever wants the bytes subscribes (`Telemetry.subscribe_progress`): the executor
attributes them to the node running when they are read, and a subscriber that raises (a cancelled run)
stops the load, which the manager then drops half-built.

The totals are the bytes the ledger accounts for the component (`source.nbytes(dtype)`, or the safetensors
headers at the run dtype), so the last report of a load says exactly what the memory plot will show.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from memory.telemetry import LoadProgress, Telemetry
from memory.weights import header_entries

# A whole-module load reports at most this many times (plus its start), however many tensors it has; the
# node context then throttles in time. benchmarks/load_progress.py measures what it costs.
REPORT_PARTS = 200


class ReportingSource:
    """A `WeightSource` that reports the bytes it has yielded during a whole-module load.

    Block streaming asks for a few tensors at a time while a sampler runs; those requests are not a load a
    user waits for, so only a request for every tensor of the source is reported.
    """

    def __init__(self, source: Any, label: str, telemetry: Telemetry) -> None:
        self.source = source
        self.label = label
        self.telemetry = telemetry
        self._count: int | None = None
        self._nbytes: dict[torch.dtype, int] = {}

    def __getattr__(self, name: str) -> Any:  # names(), check(), key_map...: the wrapped source's
        return getattr(self.source, name)

    def nbytes(self, dtype: torch.dtype) -> int:
        if dtype not in self._nbytes:  # read from the headers: once, not on every load
            self._nbytes[dtype] = int(self.source.nbytes(dtype))
        return self._nbytes[dtype]

    def _tensor_count(self) -> int:
        if self._count is None:
            names = getattr(self.source, "names", None)
            if callable(names):
                self._count = len(names())
            else:
                self._count = sum(1 for _ in header_entries(self.source.files))
        return self._count

    def _report(self, done: int, total: int) -> None:
        self.telemetry.progress(LoadProgress(self.label, done, total))

    def load(self, names: Sequence[str], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        if len(names) < self._tensor_count():
            yield from self.source.load(names, dtype)
            return
        total = self.nbytes(dtype)
        done = reported = 0
        self._report(0, total)
        for name, t in self.source.load(names, dtype):
            done += t.numel() * t.element_size()
            yield name, t
            if done - reported >= total // REPORT_PARTS or done >= total:  # a UNet has ~700 tensors
                reported = done
                self._report(min(done, total), total)
        if done < total:
            self._report(total, total)  # non-persistent extras counted in the total
