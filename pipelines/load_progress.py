"""Progress of reading model weights, in bytes, for loaders that take an `on_progress` callback.

Lives here: `OnProgress` (the callback type: label, bytes done, bytes total), `ProgressSource` (wraps a
`memory.weights.WeightSource` and reports each tensor it yields), `progress_build` (wraps a whole-module
build: reports before and after). May import: stdlib, memory (torch only inside functions: node listings
import this module through nodes.context).

The totals are the bytes the ledger accounts for the component (`source.nbytes(dtype)`, or the safetensors
headers at the run dtype), so the last report of a load says exactly what the memory plot will show.
Calls may raise (a cancelled run): the manager then drops the half-built module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# (label, done, total): e.g. ("unet", 1 << 30, 3 << 30). Bytes, at the dtype the model runs in.
OnProgress = Callable[[str, int, int], None]

# A whole-module load calls back at most this many times (plus its start), however many tensors it has;
# the node context then throttles in time. benchmarks/load_progress.py measures what it costs.
REPORT_PARTS = 200


class ProgressSource:
    """A `WeightSource` that reports the bytes it has yielded during a whole-module load.

    Block streaming asks for a few tensors at a time while a sampler runs; those requests are not a load a
    user waits for, so only a request for every tensor of the source is reported.
    """

    def __init__(self, source: Any, label: str, on_progress: OnProgress) -> None:
        self.source = source
        self.label = label
        self.on_progress = on_progress
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
                from memory.weights import header_entries

                self._count = sum(1 for _ in header_entries(self.source.files))
        return self._count

    def load(self, names: Sequence[str], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        if len(names) < self._tensor_count():
            yield from self.source.load(names, dtype)
            return
        total = self.nbytes(dtype)
        done = reported = 0
        self.on_progress(self.label, 0, total)
        for name, t in self.source.load(names, dtype):
            done += t.numel() * t.element_size()
            yield name, t
            if done - reported >= total // REPORT_PARTS or done >= total:  # a UNet has ~700 tensors
                reported = done
                self.on_progress(self.label, min(done, total), total)
        if done < total:
            self.on_progress(self.label, total, total)  # non-persistent extras counted in the total


def progress_build(
    build: Callable[[], Any],
    label: str,
    total: int,
    on_progress: OnProgress,
    dtype: torch.dtype | None = None,
) -> Callable[[], Any]:
    """`build` (a `from_pretrained`-style call with no per-tensor hook) that reports 0 before and the bytes
    after. `total` 0: not known before the build; the last report then counts the built module's tensors at
    `dtype` (None: as stored), as the ledger does for such a component."""

    def built() -> Any:
        on_progress(label, 0, total)
        module = build()
        final = total
        if not final:
            from memory.weights import module_bytes

            final = int(module_bytes(module, dtype))
        on_progress(label, final, final)
        return module

    return built


def files_bytes(files: Sequence[Path], dtype: torch.dtype) -> int:
    """What the ledger counts for a component read whole from these safetensors files at `dtype`."""
    from memory.weights import header_bytes

    safe = [Path(f) for f in files if Path(f).suffix == ".safetensors"]
    return int(header_bytes(safe, dtype)) if safe else 0


def with_progress(
    source: Any, build: Callable[[], Any], label: str, on_progress: OnProgress | None, total: int = 0
) -> tuple[Any, Callable[[], Any]]:
    """(source, build) as a loader registers them, reporting to `on_progress` when one is given: through the
    source when the manager fills the module tensor by tensor, else around the whole build."""
    if on_progress is None:
        return source, build
    if source is not None:
        return ProgressSource(source, label, on_progress), build
    return None, progress_build(build, label, total, on_progress)
