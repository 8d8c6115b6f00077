"""The progress callback of a long call that is not a weight load (a first GGUF conversion), and the bytes
the ledger counts for safetensors files.

Lives here: `OnProgress` (the callback type: label, done, total), `files_bytes`. May import: stdlib, memory
(torch only inside functions: node listings import this module through nodes.context).

Weight loads report no callback: the memory manager sends their bytes as `memory.telemetry.LoadProgress`
(the one owner: `memory.load_progress`), and the executor attributes them to the running node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# (label, done, total): e.g. ("GGUF: reading tokens (1/4)", 40, 100). May raise to cancel.
OnProgress = Callable[[str, int, int], None]


def files_bytes(files: Sequence[Path], dtype: torch.dtype) -> int:
    """What the ledger counts for a component read whole from these safetensors files at `dtype`."""
    from memory.weights import header_bytes

    safe = [Path(f) for f in files if Path(f).suffix == ".safetensors"]
    return int(header_bytes(safe, dtype)) if safe else 0
