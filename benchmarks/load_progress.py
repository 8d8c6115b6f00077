"""Does reporting load progress slow loading? The same weights loaded tensor by tensor with and without the
progress reports, side by side in one process, alternating, and the ratio of the medians printed.

    python benchmarks/load_progress.py [--mib 256] [--tensors 1200] [--repeats 5]

The file is float16 and loads as float32 (a cast per tensor, as a CPU run of an fp16 checkpoint does); the
reports take the real path: `memory.load_progress.ReportingSource` -> `LoadProgress` telemetry ->
`nodes.context.loads_reported_to` -> `NodeContext.progress` (throttled) -> an event list. Nothing here is a test: a ratio near 1.00 is the claim, printed, not asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from memory import MemoryConfig, MemoryManager
from memory.load_progress import ReportingSource
from memory.weights import SafetensorsSource, fill_empty
from nodes.context import CancelToken, NodeContext, loads_reported_to


def make_file(path: Path, mib: int, tensors: int) -> list[tuple[str, tuple[int, ...]]]:
    per = mib * 2**20 // 2 // tensors  # float16 elements per tensor
    side = max(int(per**0.5), 1)
    shapes = [(f"layers.{i}.weight", (side, side)) for i in range(tensors)]
    gen = torch.Generator().manual_seed(0)
    save_file({name: torch.randn(shape, generator=gen).half() for name, shape in shapes}, str(path))
    return shapes


def empty_module(shapes: list[tuple[str, tuple[int, ...]]]) -> torch.nn.Module:
    module = torch.nn.Module()
    layers = torch.nn.ModuleList()
    for _, shape in shapes:
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.empty(shape, device="meta"), requires_grad=False)
        layers.append(layer)
    module.layers = layers
    return module


def load_once(source: object, shapes: list) -> float:
    module = empty_module(shapes)
    t0 = time.perf_counter()
    fill_empty(module, source, torch.float32)
    seconds = time.perf_counter() - t0
    del module
    gc.collect()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, MemoryManager(MemoryConfig(device="cpu")) as mm:
        path = Path(tmp) / "weights.safetensors"
        shapes = make_file(path, args.mib, args.tensors)
        events: list[object] = []
        ctx = NodeContext(
            node_id="bench",
            node_type="Bench",
            memory=mm,
            out_dir=Path(tmp),
            workflow_json={},
            emit=events.append,
            cancel=CancelToken(),
        )
        # As a loader registers them: one source per component, kept across loads.
        bare = SafetensorsSource((path,))
        wrapped = ReportingSource(SafetensorsSource((path,)), "model", mm.telemetry)
        load_once(bare, shapes)  # warm the page cache and the sources' key maps
        load_once(wrapped, shapes)
        events.clear()
        plain, reported = [], []
        with loads_reported_to(mm, ctx):
            for _ in range(args.repeats):
                plain.append(load_once(bare, shapes))
                reported.append(load_once(wrapped, shapes))
        a, b = statistics.median(plain), statistics.median(reported)
        print(
            f"{args.tensors} tensors, {args.mib} MiB float16 -> float32, {args.repeats} loads each (medians)"
        )
        print(f"  without progress: {a:.3f} s")
        print(f"  with progress:    {b:.3f} s  ({len(events) / args.repeats:.0f} events per load)")
        print(f"  ratio with/without: {b / a:.2f}")


if __name__ == "__main__":
    main()
