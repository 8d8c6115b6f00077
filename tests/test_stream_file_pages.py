"""Streaming from a memory-mapped file keeps the file's resident pages bounded: what lets a model whose file
is bigger than RAM run (`--offload stream`). Measured here on a small file, cold in the page cache at the
start: after a streamed forward at most a couple of blocks' pages stay cached (`mincore`), and the
process's file-backed RSS (sampled from a thread at 200 Hz) never rises by more than a few blocks.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from memory.policies.stream import StreamConfig, apply_streaming, remove_streaming
from memory.weights import SafetensorsSource, drop_file_pages, tensor_offsets

WIDTH, DEPTH = 512, 16  # 16 blocks of 512 x 512 float32: 1 MiB each
BLOCK = WIDTH * WIDTH * 4
PAGE = os.sysconf("SC_PAGE_SIZE")


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _cached_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache, by `mincore` over a fresh read-only mapping."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) == 0
        libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec) * PAGE


def _rss_file() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


@pytest.mark.slow  # ~1-4 s: a flush to disk and two streamed forwards
@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise (Linux)")
def test_streaming_keeps_the_files_resident_pages_bounded(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Stack().eval()
    path = tmp_path / "stack.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    x = torch.randn(4, WIDTH)
    expected = model(x)
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # written pages are dirty until flushed, and fadvise drops only clean ones
    os.close(fd)
    drop_file_pages([(path, 0, size)])
    cold = _cached_bytes(path)
    assert cold < size // 4, "the page cache kept the file; the measurement below needs it cold"

    state = apply_streaming(
        model, StreamConfig(torch.device("cpu"), ("layers",), source=SafetensorsSource([path]))
    )
    base, peak, done = _rss_file(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_file())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with torch.no_grad():
            out = model(x)
            out = model(x)  # a second step reads every block again
        cached = _cached_bytes(path)  # before `remove_streaming`, which reads every block back in
    finally:
        done.set()
        sampler.join()
        remove_streaming(model)
    assert state.take_transfer_stats()[0] == 2 * DEPTH * BLOCK  # every block was read from the file, twice
    torch.testing.assert_close(out, expected)  # same weights, same kernels: only where they come from changed
    # Without dropping, the whole file (16 blocks) would stay cached; the next block is kept for its read-ahead,
    # which may reach a little into the one after (2.4 blocks measured once): 3 blocks of 16.
    assert cached <= cold + 3 * BLOCK, cached / BLOCK
    # File-backed RSS: the block being read (a whole-file mapping per handle, see memory.weights) and no more.
    assert peak[0] - base <= 3 * BLOCK, (peak[0] - base) / BLOCK


def test_tensor_offsets_point_at_each_tensors_bytes(tmp_path: Path) -> None:
    t = {"a": torch.arange(6, dtype=torch.float32), "b": torch.arange(3, dtype=torch.int64)}
    path = tmp_path / "t.safetensors"
    save_file(t, str(path))
    raw = path.read_bytes()
    for key, (start, end) in tensor_offsets(path).items():
        assert raw[start:end] == t[key].numpy().tobytes()
