"""Giving host memory back to the OS after the last reference to a model is gone.

May import: stdlib, torch.
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
