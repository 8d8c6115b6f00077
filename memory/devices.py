"""Devices and readings: resolve "auto|cpu|cuda:N|mps", and read device and host memory as frozen snapshots.

May import: stdlib, torch, psutil, pynvml (nvidia-ml-py).
Readings are values: take one, pass it around, compare two. Nothing here caches state between calls
except `NvmlProbe`, an object its owner creates and closes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

_STATUS = Path("/proc/self/status")


def resolve_device(spec: str) -> torch.device:
    """Turn a config string into a torch.device. `auto` prefers CUDA, then MPS, then CPU."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {spec!r} asked for, but this torch build sees no CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("device 'mps' asked for, but MPS is not available")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {spec!r}; use auto, cpu, cuda:N or mps")
    return device


@dataclass(frozen=True)
class HostReading:
    """Host RAM at one instant (bytes). `peak_rss` is the kernel's high-water mark (Linux VmHWM) or None."""

    t: float
    rss: int
    available: int
    total: int
    peak_rss: int | None


@dataclass(frozen=True)
class DeviceReading:
    """Accelerator memory at one instant (bytes). On CPU every field except `total`/`free` is 0.

    `free`/`total` come from the driver (`torch.cuda.mem_get_info`); allocated/reserved/max_allocated from
    PyTorch's caching allocator for this process; `other_processes` from NVML when it can tell.
    """

    t: float
    device: str
    free: int
    total: int
    allocated: int
    reserved: int
    max_allocated: int
    other_processes: int | None


def read_host() -> HostReading:
    vm = psutil.virtual_memory()
    rss = psutil.Process().memory_info().rss
    return HostReading(
        t=time.monotonic(), rss=rss, available=vm.available, total=vm.total, peak_rss=peak_rss()
    )


def peak_rss() -> int | None:
    """The process's peak RSS since start, the kernel's VmHWM (Linux only, else None).

    Read only: Nodeloom never resets it (writing /proc/self/clear_refs would make outside tools such as
    `/usr/bin/time -v` under-report); per-node peaks come from `memory.peaks` instead.
    """
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def read_device(device: torch.device, nvml: NvmlProbe | None = None) -> DeviceReading:
    now = time.monotonic()
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        others = nvml.other_processes_bytes(device) if nvml is not None else None
        return DeviceReading(
            t=now,
            device=str(device),
            free=free,
            total=total,
            allocated=torch.cuda.memory_allocated(device),
            reserved=torch.cuda.memory_reserved(device),
            max_allocated=torch.cuda.max_memory_allocated(device),
            other_processes=others,
        )
    if device.type == "mps":
        total = torch.mps.recommended_max_memory()
        driver = torch.mps.driver_allocated_memory()
        allocated = torch.mps.current_allocated_memory()
        return DeviceReading(
            now, str(device), max(total - driver, 0), total, allocated, driver, allocated, None
        )
    vm = psutil.virtual_memory()
    return DeviceReading(now, "cpu", vm.available, vm.total, 0, 0, 0, None)


class NvmlProbe:
    """NVML access for the bits PyTorch can't see: other processes' memory on our GPU.

    Optional by design: no driver, no NVML library, or a container without process visibility all leave
    `other_processes_bytes` returning None, and nothing else depends on it.
    """

    def __init__(self) -> None:
        self._ok = False
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._ok = True
        except Exception:  # noqa: BLE001 - NVML raises its own error types or fails to load its library
            self._ok = False

    def other_processes_bytes(self, device: torch.device) -> int | None:
        if not self._ok:
            return None
        nv = self._nvml
        try:
            # Match by UUID: CUDA_VISIBLE_DEVICES renumbers devices, NVML does not.
            uuid = str(torch.cuda.get_device_properties(device).uuid)
            handle = None
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                if uuid in str(nv.nvmlDeviceGetUUID(h)):
                    handle = h
                    break
            if handle is None:
                return None
            me = os.getpid()
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
            return sum(int(p.usedGpuMemory or 0) for p in procs if p.pid != me)
        except nv.NVMLError:
            return None

    def close(self) -> None:
        if self._ok:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._ok = False
