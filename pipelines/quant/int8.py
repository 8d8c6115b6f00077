"""Weight-only int8 storage with one scale per output channel, upcast per layer right before its forward.

Lives here: `apply_int8`, `quantize_per_channel`, `load_int8_weight`, `INT8_HOOK`.
May import: stdlib, torch, diffusers.hooks.

Shaped like diffusers' `LayerwiseCastingHook` (a `ModelHook` on each Linear/Conv, registered in the layer's
`HookRegistry`): the weight parameter holds int8 data and a `weight_scale` buffer holds one float32 scale per
output channel (absmax / 127, symmetric). `pre_forward` swaps in `q * scale` at the compute dtype, on the
device the weight is on; `post_forward` swaps the int8 data back, so the float copy lives for one layer.

Why not torchao or optimum-quanto (both install here for torch 2.13 CPU; see the README): torchao's
`Int8WeightOnlyConfig` quantizes Linear only (`aten.convolution` is unimplemented for its `Int8Tensor`), and a
UNet and a VAE are mostly convolutions; quanto handles both but runs a Linear ~25x slower than torchao on this
CPU. Both wrap weights in tensor subclasses whose `dtype` says float32, so the ledger (numel x element size),
streaming (plain tensors moved slot by slot) and strip-on-evict would each need special cases.
"""

from __future__ import annotations

from typing import Any

import torch
from diffusers.hooks import HookRegistry, ModelHook

INT8_HOOK = "nodeloom_int8"
# The layers diffusers' layerwise casting handles (`_GO_LC_SUPPORTED_PYTORCH_LAYERS`). Scales go along dim 0:
# output channels (Linear/Conv), input channels (ConvTranspose), token rows (Embedding).
_LAYERS = (
    torch.nn.Linear,
    torch.nn.Conv1d,
    torch.nn.Conv2d,
    torch.nn.Conv3d,
    torch.nn.ConvTranspose1d,
    torch.nn.ConvTranspose2d,
    torch.nn.ConvTranspose3d,
    torch.nn.Embedding,
)


def quantize_per_channel(w: torch.Tensor, rows: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, float32 scale broadcastable to it): symmetric, one scale per output channel (dim 0).

    Done `rows` channels at a time, so the float temporaries stay small next to a 49k-token embedding table.
    """
    q = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scale = torch.empty((w.shape[0],) + (1,) * (w.ndim - 1), dtype=torch.float32, device=w.device)
    for i in range(0, w.shape[0], rows):
        chunk = w[i : i + rows].float()
        amax = chunk.abs().amax(dim=tuple(range(1, w.ndim)), keepdim=True)  # (rows, 1, ...)
        s = (amax / 127.0).clamp(min=torch.finfo(torch.float32).tiny)
        q[i : i + rows] = torch.round(chunk / s).clamp_(-127, 127)
        scale[i : i + rows] = s
    return q, scale


class Int8WeightHook(ModelHook):
    _is_stateful = False

    def __init__(self, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.compute_dtype = compute_dtype
        self._stored: torch.Tensor | None = None

    def initialize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
        w = module.weight
        if w.device.type == "meta":  # filled later by `load_int8_weight`
            q = torch.empty(w.shape, dtype=torch.int8, device="meta")
            scale = torch.empty((w.shape[0],) + (1,) * (w.ndim - 1), device="meta")
        else:
            q, scale = quantize_per_channel(w.detach())
        module.weight = torch.nn.Parameter(q, requires_grad=False)
        module.register_buffer("weight_scale", scale)
        return module

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        self._stored = module.weight.data
        dt = self.compute_dtype
        # One allocation (int8 x float promotes to float): the layer's only float copy.
        scale = module.weight_scale.to(device=self._stored.device, dtype=dt)
        module.weight.data = torch.mul(self._stored, scale)
        bias = getattr(module, "bias", None)
        if bias is not None and bias.dtype != dt:
            bias.data = bias.data.to(dt)
        return args, kwargs

    def post_forward(self, module: torch.nn.Module, output: Any) -> Any:
        if self._stored is not None:
            module.weight.data = self._stored
            self._stored = None
        return output


class Int8EmbeddingHook(Int8WeightHook):
    """An int8 embedding table: a lookup upcasts only the rows asked for, never the whole table."""

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        return args, kwargs

    def post_forward(self, module: torch.nn.Module, output: Any) -> Any:
        return output

    def new_forward(
        self, module: torch.nn.Module, ids: torch.Tensor, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        dt = self.compute_dtype
        rows = module.weight[ids].to(dt)  # (..., dim)
        return rows * module.weight_scale.reshape(-1)[ids].unsqueeze(-1).to(dt)


def apply_int8(
    module: torch.nn.Module, compute_dtype: torch.dtype, skip: tuple[str, ...] = ()
) -> list[torch.nn.Module]:
    """Put every Linear/Conv weight of `module` (not matching a `skip` pattern) in int8. Returns the layers."""
    import re

    done = []
    for name, sub in module.named_modules():
        if not isinstance(sub, _LAYERS) or any(re.search(p, name) for p in skip):
            continue
        # An embedding table looks up its rows (Int8EmbeddingHook); upcasting it whole per call would hold a
        # float copy of the table (152 MiB for CLIP's 49408 x 768) for a 77-token prompt.
        hook = Int8EmbeddingHook if isinstance(sub, torch.nn.Embedding) else Int8WeightHook
        HookRegistry.check_if_exists_or_initialize(sub).register_hook(hook(compute_dtype), INT8_HOOK)
        done.append(sub)
    return done


def is_int8_layer(module: torch.nn.Module) -> bool:
    return isinstance(getattr(module, "weight_scale", None), torch.Tensor) and (
        module.weight.dtype == torch.int8
    )


def load_int8_weight(module: torch.nn.Module, w: torch.Tensor) -> None:
    """Quantize a float weight from a file into an int8 layer (possibly still on the meta device)."""
    q, scale = quantize_per_channel(w)
    module.weight = torch.nn.Parameter(q, requires_grad=False)
    module.weight_scale = scale
