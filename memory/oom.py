"""Out-of-memory errors: which exceptions are one, and the size of the allocation that failed.

Lives here: `is_oom_error`, `failed_allocation_bytes`. May import: stdlib, torch, memory.config, memory.errors.
`MemoryManager.is_oom` and `recover_from_oom` (memory.manager) use them.
"""

from __future__ import annotations

import re

import torch

from memory.config import parse_bytes
from memory.errors import BudgetExceeded

# torch's messages: CUDA/MPS "Tried to allocate 2.00 GiB (GPU 0; ...)", CPU "you tried to allocate 123 bytes".
_TRIED_RE = re.compile(r"[Tt]ried to allocate ([0-9.]+) ?([KMGT]i?B|bytes)")


def failed_allocation_bytes(exc: BaseException) -> int:
    """The size in an allocator's message ("Tried to allocate 2.00 GiB"), or 0."""
    match = _TRIED_RE.search(str(exc))
    if not match:
        return 0
    return parse_bytes(match.group(1) + match.group(2).removesuffix("bytes"))


def is_oom_error(exc: BaseException) -> bool:
    """True for torch's OutOfMemoryError (CUDA), our BudgetExceeded, and allocator failures on CPU/MPS."""
    msg = str(exc)
    return isinstance(exc, torch.OutOfMemoryError | BudgetExceeded | MemoryError) or (
        isinstance(exc, RuntimeError) and ("out of memory" in msg.lower() or "can't allocate memory" in msg)
    )
