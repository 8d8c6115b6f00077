"""A VAE decode that holds fewer full-size activations at once, with the same picture.

Lives here: `lean_decoder`, `BAND_BYTES`. May import: torch.

Where a 2D VAE decoder's memory goes at full size (SD's AutoencoderKL at 256x256, profiled per module, see
the README's int8 section): beside the tensors the forward must hold (a resnet's input, for its shortcut),
each Conv2d's CPU kernel copies its whole input and output into its own blocked layout, a nearest 2x
upsample makes a full-size copy the conv after it reads once, and SiLU writes a new tensor next to the norm
output it replaces. `lean_decoder(vae)` changes only how these run, for the length of one decode:
- a stride-1, zero-padded Conv2d whose input is larger than `BAND_BYTES` runs in bands of rows, each band
  read with its `padding` rows of halo (so every output row sees exactly the input rows it saw before) and
  written into one output tensor: the kernel's copies are a band's, not the picture's;
- an Upsample2D (nearest 2x, then a conv) upsamples and convolves band by band, so the 4x-sized upsampled
  tensor never exists whole (nearest upsampling of a band of rows is those rows of the whole upsampling);
- a ResnetBlock2D's and the decoder's SiLU, which always follow a GroupNorm's fresh output, run in place.
Each output value is computed by the same kernel from the same inputs, so the picture stays the same (the
tests check it against the plain decode, bit for bit on this CPU). Layers with hooks (int8 storage, LoRA
patches) keep them: a band calls the layer's own forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

BAND_BYTES = (
    4 * 2**20
)  # a conv input above this runs in row bands (glibc maps >= 4 MiB on its own: freed at once)


def _bandable(conv: torch.nn.Module) -> bool:
    return (
        isinstance(conv, torch.nn.Conv2d)
        and isinstance(conv.padding, tuple)
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.padding_mode == "zeros"
        and conv.kernel_size[0] == 2 * conv.padding[0] + 1
    )


def _rows_per_band(x: torch.Tensor, rows: int) -> int:
    return max(1, rows * BAND_BYTES // max(1, x.numel() * x.element_size()))


def _banded_conv(forward: Callable[..., torch.Tensor], pad: int) -> Callable[..., torch.Tensor]:
    def run(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if x.dim() != 4 or x.numel() * x.element_size() <= BAND_BYTES or args or kwargs:
            return forward(x, *args, **kwargs)
        height = x.shape[-2]
        step = _rows_per_band(x, height)
        out: torch.Tensor | None = None
        for r0 in range(0, height, step):
            r1 = min(height, r0 + step)
            s0, s1 = max(0, r0 - pad), min(height, r1 + pad)  # the band's rows and their halo
            y = forward(x[:, :, s0:s1])  # (B, C_out, s1 - s0, W): row j is input row s0 + j's output
            if out is None:
                out = y.new_empty((*y.shape[:2], height, y.shape[-1]))
            out[:, :, r0:r1] = y[:, :, r0 - s0 : r1 - s0]
            del y
        assert out is not None
        return out

    return run


def _banded_upsample(
    up: torch.nn.Module, forward: Callable[..., torch.Tensor]
) -> Callable[..., torch.Tensor]:
    conv = up.conv
    pad = conv.padding[0]

    def run(x: torch.Tensor, output_size: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        big = x.numel() * x.element_size() * 4 > BAND_BYTES
        if output_size is not None or args or kwargs or x.dim() != 4 or not big:
            return forward(x, output_size, *args, **kwargs)
        height = 2 * x.shape[-2]  # of the upsampled picture
        step = _rows_per_band(x, height // 4)
        out: torch.Tensor | None = None
        for r0 in range(0, height, step):
            r1 = min(height, r0 + step)
            s0, s1 = max(0, r0 - pad), min(height, r1 + pad)  # upsampled rows the band's conv reads
            a, b = s0 // 2, (s1 + 1) // 2  # the input rows they come from (row i of 2x is row i // 2)
            band = F.interpolate(x[:, :, a:b], scale_factor=2.0, mode="nearest")[
                :, :, s0 - 2 * a : s1 - 2 * a
            ]
            y = conv(band)
            del band
            if out is None:
                out = y.new_empty((*y.shape[:2], height, y.shape[-1]))
            out[:, :, r0:r1] = y[:, :, r0 - s0 : r1 - s0]
            del y
        assert out is not None
        return out

    return run


def _plain_upsample(up: torch.nn.Module) -> bool:
    return (
        type(up).__name__ == "Upsample2D"
        and getattr(up, "norm", None) is None
        and not getattr(up, "use_conv_transpose", True)
        and getattr(up, "interpolate", False)
        and getattr(up, "use_conv", False)
        and getattr(up, "name", "") == "conv"
        and _bandable(getattr(up, "conv", None))
    )


@contextmanager
def lean_decoder(vae: torch.nn.Module) -> Iterator[None]:
    """For one decode of `vae` (a diffusers AutoencoderKL-style 2D VAE): banded convs and upsamples, in-place
    SiLU (see the module docstring); everything is put back on exit."""
    decoder = getattr(vae, "decoder", None)
    if decoder is None:
        yield
        return
    swapped: list[tuple[torch.nn.Module, str, Any]] = []  # (module, attribute, value before)
    inplace: list[torch.nn.SiLU] = []
    upsampled = {id(m.conv) for m in decoder.modules() if _plain_upsample(m)}  # banded by their upsample
    try:
        for module in decoder.modules():
            if _plain_upsample(module):
                swapped.append((module, "forward", module.__dict__.get("forward")))
                module.forward = _banded_upsample(module, module.forward)
            elif _bandable(module) and id(module) not in upsampled:
                swapped.append((module, "forward", module.__dict__.get("forward")))
                module.forward = _banded_conv(module.forward, module.padding[0])
            norms_first = type(module).__name__ == "ResnetBlock2D" and all(
                isinstance(getattr(module, n, None), torch.nn.GroupNorm) for n in ("norm1", "norm2")
            )
            act = getattr(module, "nonlinearity", None)
            if norms_first and isinstance(act, torch.nn.SiLU) and not act.inplace:
                inplace.append(act)
        act = getattr(decoder, "conv_act", None)
        if isinstance(getattr(decoder, "conv_norm_out", None), torch.nn.GroupNorm) and isinstance(
            act, torch.nn.SiLU
        ):
            if not act.inplace:
                inplace.append(act)
        for act in inplace:
            act.inplace = True
        yield
    finally:
        for act in inplace:
            act.inplace = False
        for module, name, before in reversed(swapped):
            if before is None:
                module.__dict__.pop(name, None)
            else:
                setattr(module, name, before)
