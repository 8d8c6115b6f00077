"""The most bytes of activations alive at once during a call: a test instrument for working-memory formulas.

Lives here: `live_tensor_peak`. Imports torch only.

A `TorchDispatchMode` sees every tensor an op returns; each new storage is counted until it is freed
(a weak reference to the storage expires). Parameters and buffers are not activations and are left out.
It works on the meta device, so a full-size SDXL or Flux is measured in seconds without a byte of weights.
Attention runs through a shape-only stand-in for `scaled_dot_product_attention`: the fused kernels PyTorch
picks on CPU and CUDA never materialise the tokens x tokens scores, but meta's math fallback would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _LiveBytes(TorchDispatchMode):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        tensors = [*model.parameters(), *model.buffers()]
        self.weights = {t.untyped_storage()._cdata for t in tensors}
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self.live and key not in self.weights:
                    self.live[key] = (StorageWeakRef(storage), storage.nbytes())
                    self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        return out


def _fused_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
    query = args[0] if args else kwargs["query"]
    value = args[2] if len(args) > 2 else kwargs["value"]
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def live_tensor_peak(model: torch.nn.Module, call: Callable[[], Any]) -> int:
    """Peak bytes of activations alive at once while `call()` runs `model` (without autograd)."""
    tracker = _LiveBytes(model)
    with torch.no_grad(), mock.patch.object(F, "scaled_dot_product_attention", _fused_attention), tracker:
        call()
    return tracker.peak
