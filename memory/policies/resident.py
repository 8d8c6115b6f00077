"""Whole-module placement: move a module to the execution device, or back to host memory.

May import: stdlib, torch, memory.weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memory.weights import module_bytes, named_tensors


@dataclass(frozen=True)
class ResidentConfig:
    device: torch.device
    dtype: torch.dtype | None = torch.float32  # None: keep the dtypes as built (quantized storage)


def apply_resident(module: torch.nn.Module, config: ResidentConfig) -> int:
    """Cast floating weights to `dtype` and move the whole module to `device`. Returns its bytes there.

    On CPU with a file already at `dtype` this copies nothing: the memory-mapped tensors stay mapped.
    """
    if config.dtype is not None and any(
        t.is_floating_point() and t.dtype != config.dtype for _, t in named_tensors(module)
    ):
        # Only when needed: diffusers warns on every `.to(dtype)`, even a no-op one.
        module.to(dtype=config.dtype)
    module.to(config.device)
    return module_bytes(module)


def offload_module(module: torch.nn.Module) -> int:
    """Move a module's weights to pageable host memory. Returns the bytes moved."""
    module.to("cpu")
    return module_bytes(module)
