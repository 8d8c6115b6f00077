"""Freed tensors leave the process's RSS: the memory manager has glibc map large allocations on their own.

What a user checks: after a node's activations are freed, the system monitor's figure comes back down (the
plan predicts RSS, and a heap that keeps freed blocks resident grows it node after node). Run in a fresh
process: glibc's threshold is a process setting, and the test needs the heap as a new process has it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

_CODE = """
import os, sys, torch
from memory.release import return_large_frees
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
if sys.argv[1] == "set":
    assert return_large_frees()
# Warm-up: torch's first allocations, and one 6 MiB block freed (glibc then serves blocks up to 6 MiB from
# its heap when its threshold is left to rise).
torch.ones(6 * 2**20 // 4)
start = rss()
blocks = [torch.ones(6 * 2**20 // 4) for _ in range(10)]  # 60 MiB of activations, written
del blocks[:-1]  # freed, all but the last one (which keeps the heap's top in place)
print((rss() - start) / 2**20)
"""


def _left_after_free(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _CODE, mode], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh processes that import torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_activations_leave_rss_once_large_frees_are_returned() -> None:
    kept = _left_after_free("set")
    # One 6 MiB block is still alive; 2 MiB of slack for the interpreter's own small allocations.
    assert kept <= 6 + 2, f"{kept:.1f} MiB still resident after freeing 54 MiB"
    default = _left_after_free("default")
    assert default > kept + 20, f"glibc's default kept {default:.1f} MiB; with the setting {kept:.1f} MiB"
