"""Giving host memory back to the OS after the last reference to a model is gone.

May import: stdlib, torch.
"""

from __future__ import annotations

import ctypes
import gc
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


def release_host_memory() -> None:
    """Collect garbage, then trim the heap. For memory whose owner can't be stripped of its tensors.

    Order matters: glibc can only return pages nobody points at, so trimming before the last reference
    to the tensors is dropped (and cycles collected) frees nothing. The manager itself strips evicted
    modules' tensors (replacing each with an empty one), which frees them without waiting for a collection,
    and then calls only `malloc_trim`.
    """
    gc.collect()
    malloc_trim()
