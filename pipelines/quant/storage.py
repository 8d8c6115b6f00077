"""Weight storage formats chosen at load: plain float, fp8 (e4m3fn / e5m2) or per-channel int8.

Lives here (the names in pipelines.quant.formats): `STORAGE_CHOICES`, `split_precision`, `apply_storage`, `upcast_bytes`, `STORAGE_SKIP`.
May import: stdlib, torch, diffusers.hooks, pipelines.quant.int8 / planned_bytes.

A loader node's `dtype` choice is either a compute dtype ("auto", "float32", ...) or a storage format. With
a storage format the model computes at the "auto" dtype (float32 on CPU, the family's half type on CUDA),
but every Linear/Conv weight is kept in 8 bits and upcast by a hook right before that layer's forward:
- fp8: diffusers' `apply_layerwise_casting` (the same as ComfyUI's `weight_dtype`), unscaled casts;
- int8: `pipelines.quant.int8` (absmax scale per output channel).
Norms, embeddings and the layers diffusers keeps at full precision (`_skip_layerwise_casting_patterns`, else
pos/patch embeddings, norms, proj_in/proj_out) stay at the compute dtype, as diffusers does.
"""

from __future__ import annotations

import torch

from pipelines.quant.formats import STORAGE_CHOICES
from pipelines.quant.int8 import apply_int8
from pipelines.quant.planned_bytes import DEFAULT_SKIP

FP8 = {"fp8_e4m3fn": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
assert STORAGE_CHOICES == (*FP8, "int8"), "one list of names: pipelines.quant.formats"
# diffusers' DEFAULT_SKIP_MODULES_PATTERN: layers that lose the most from 8 bits and weigh the least.
STORAGE_SKIP: tuple[str, ...] = DEFAULT_SKIP  # one list, also read by the plan's header estimate

_UPCAST_ATTR = "_nodeloom_upcast_bytes"


def _skip_patterns(module: torch.nn.Module) -> tuple[str, ...]:
    declared = getattr(module, "_skip_layerwise_casting_patterns", None)
    return tuple(declared) if declared else STORAGE_SKIP


def apply_storage(module: torch.nn.Module, storage: str, compute_dtype: torch.dtype) -> torch.nn.Module:
    """Put `module`'s Linear/Conv weights in `storage` (a `STORAGE_CHOICES` label) with per-layer upcast hooks.

    Works on a module on the meta device (before its tensors are loaded) as well as a loaded one. Declares
    `_nodeloom_upcast_bytes`: the largest layer's weights at `compute_dtype`, the memory manager's extra
    working memory for the upcast copy.
    """
    if not storage:
        return module
    esize = torch.empty((), dtype=compute_dtype).element_size()
    skip = _skip_patterns(module)
    if storage in FP8:
        from diffusers.hooks import apply_layerwise_casting

        apply_layerwise_casting(module, FP8[storage], compute_dtype, skip_modules_pattern=skip)
        layers = [m for m in module.modules() if _has_hook(m, "layerwise_casting")]
    elif storage == "int8":
        # Embedding lookups upcast only their rows (Int8EmbeddingHook): not an upcast buffer of the table.
        layers = [m for m in apply_int8(module, compute_dtype, skip) if not isinstance(m, torch.nn.Embedding)]
    else:
        raise ValueError(f"unknown weight storage {storage!r} (one of {', '.join(STORAGE_CHOICES)})")
    largest = max((sum(p.numel() for p in m.parameters(recurse=False)) for m in layers), default=0)
    setattr(module, _UPCAST_ATTR, largest * esize)
    return module


def _has_hook(module: torch.nn.Module, name: str) -> bool:
    registry = getattr(module, "_diffusers_hook", None)
    return registry is not None and registry.get_hook(name) is not None


def upcast_bytes(module: torch.nn.Module) -> int:
    return int(getattr(module, _UPCAST_ATTR, 0))
