"""CUDA: the budget holds on the device, and streaming overlaps host-to-device copies with compute.

Skipped without a CUDA device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from memory import ComponentSpec, MemoryConfig, MemoryManager

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class Stack(torch.nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width, bias=False) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x


def stack_spec(tmp_path: Path, width: int, depth: int) -> ComponentSpec:
    path = tmp_path / f"stack{width}.safetensors"
    torch.manual_seed(0)
    save_file({k: v.half() * 0.05 for k, v in Stack(width, depth).state_dict().items()}, path)

    def build() -> Stack:
        module = Stack(width, depth).half()
        module.load_state_dict(load_file(path))
        return module

    return ComponentSpec(f"stack{width}", "stack", "other", build, (path,), torch.float16, ("layers",))


def test_max_memory_allocated_stays_under_budget(tmp_path: Path) -> None:
    spec = stack_spec(tmp_path, 2048, 16)  # 16 x 8 MiB
    x = torch.randn(64, 2048, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        want = spec.build().cuda()(x)
        torch.cuda.synchronize()
        weights = sum(p.numel() * 2 for p in spec.build().parameters())
        working = 16 * 1024**2
        cfg = MemoryConfig(
            device="cuda", policy="stream", vram_budget=str(weights // 2 + working), data_dir=tmp_path
        )
        with MemoryManager(cfg) as mm:
            handle = mm.register(spec)
            pinned = None
            for _ in range(2):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                with mm.use(handle, working_bytes=working) as module:
                    assert handle.location == "partial"
                    got = module(x)
                    torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
                assert peak <= mm.budget, f"peak {peak} over budget {mm.budget}\n{mm.ledger_text()}"
                assert torch.equal(got, want)
                # After use the streamed blocks wait in pinned host memory, pinned once and reused.
                ptrs = sorted(p.data_ptr() for p in handle.module.parameters() if p.is_pinned())
                assert ptrs and (pinned is None or ptrs == pinned)
                pinned = ptrs


def test_stream_overlaps_copies_with_compute(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    spec = stack_spec(tmp_path, 4096, 12)  # 12 x 32 MiB; big matmuls so each block's compute is long
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.float16)
    weights = 12 * 4096 * 4096 * 2
    budget = weights // 3  # activations are not declared here: this test is about copies, not accounting
    cfg = MemoryConfig(device="cuda", policy="stream", vram_budget=str(budget), data_dir=tmp_path)
    with torch.no_grad(), MemoryManager(cfg) as mm:
        handle = mm.register(spec)
        with mm.use(handle) as module:
            module(x)  # first call: learns the execution order
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                module(x)
                torch.cuda.synchronize()
            assert handle.stream.copies_on_side_stream > 0
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = [(e.time_range.start, e.time_range.end) for e in gpu if "HtoD" in e.name]
    kernels = [
        (e.time_range.start, e.time_range.end)
        for e in gpu
        if "Memcpy" not in e.name and "Memset" not in e.name
    ]
    assert copies and kernels
    overlapped = [c for c in copies if any(c[0] < k[1] and k[0] < c[1] for k in kernels)]
    assert len(overlapped) >= len(copies) // 2, f"{len(overlapped)} of {len(copies)} copies overlap compute"
