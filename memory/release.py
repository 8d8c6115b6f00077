"""Giving host memory back to the OS after the last reference to a model is gone, and as tensors are freed.

Lives here: `malloc_trim`, `return_large_frees`, `LARGE_FREE_BYTES`. May import: stdlib, torch.
"""

from __future__ import annotations

import ctypes
import sys


def malloc_trim() -> bool:
    """Ask glibc to return freed heap pages to the OS. False where there is no glibc (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        # The running process's own symbols include libc's. Not `ctypes.util.find_library`: it forks
        # `ldconfig` on every call.
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


# glibc serves an allocation of at least this many bytes with its own mmap, unmapped the moment it is freed.
# Its default (128 KiB, rising to whatever large block was last freed, up to 32 MiB) moves an activation's
# block into the heap after the first free of one, and the heap keeps freed blocks resident: a 256x256 VAE
# decode peaked at 413 MiB above its model that way against 267 MiB with a fixed 4 MiB threshold (262 MiB at
# 1 MiB, which maps many more of the small tensors). Measured on benchmarks/_sd_shaped.py's VAE, float32.
LARGE_FREE_BYTES = 4 * 2**20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)


def return_large_frees(threshold: int = LARGE_FREE_BYTES) -> bool:
    """Have glibc map every allocation of `threshold` bytes or more on its own (a fixed threshold also ends
    its dynamic raising), so a freed activation or weight copy leaves the process's RSS at once. A process
    setting, idempotent; False where there is no glibc (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):
        return False
