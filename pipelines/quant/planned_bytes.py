"""What a component kept in 8-bit storage will hold, from its files' headers: the plan's bytes before a build.

Lives here: `stored_header_bytes`. May import: stdlib, torch, memory.weights, pipelines.quant.formats.

`pipelines.quant.storage.apply_storage` puts every Linear/Conv/Embedding weight (a `.weight` of two or more
dimensions) not matching the skip patterns in 8 bits: fp8 one byte an element, int8 one byte an element plus
one float32 scale per output channel (dim 0); everything else stays at the compute dtype. The headers do not
say which tensors belong to which layer type, so this reads the rule from the names and shapes: a figure for
the plan and the budget checks before the build, which replaces it with the module's exact bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from math import prod
from pathlib import Path

import torch

from memory.weights import FLOAT_TAGS, TAG_SIZE, header_entries

DEFAULT_SKIP: tuple[str, ...] = (
    "pos_embed",
    "patch_embed",
    "norm",
    "^proj_in$",
    "^proj_out$",
)  # STORAGE_SKIP


def stored_header_bytes(
    files: Iterable[Path], storage: str, compute_dtype: torch.dtype, skip: tuple[str, ...] = DEFAULT_SKIP
) -> int:
    """Bytes of the tensors in `files` once built in `storage` ("int8", "fp8_e4m3fn", "fp8_e5m2")."""
    compute = torch.empty((), dtype=compute_dtype).element_size()
    total = 0
    for _, key, tag, shape in header_entries(files):
        numel = prod(shape)
        layer = key.removesuffix(".weight")
        eight_bit = (
            key.endswith(".weight")
            and len(shape) >= 2
            and tag in FLOAT_TAGS
            and not any(re.search(p, layer) for p in skip)
        )
        if eight_bit:
            total += numel + (4 * shape[0] if storage == "int8" else 0)
        elif tag in FLOAT_TAGS:
            total += numel * compute
        else:
            total += numel * TAG_SIZE[tag]
    return total
