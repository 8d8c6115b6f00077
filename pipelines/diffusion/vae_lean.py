"""A VAE decode that holds fewer full-size activations at once, with the same picture.

Lives here: `lean_decoder`, `lean_resnets_run`, `BAND_BYTES`. May import: torch.

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
- a ResnetBlock2D's and the decoder's SiLU, which always follow a GroupNorm's fresh output, run in place;
- a float32 ResnetBlock2D without a time embedding (every resnet of an AutoencoderKL decoder) whose input
  passes `BAND_BYTES` runs GroupNorm + SiLU + conv per band (`_lean_resnet`): the norm's statistics are
  taken over the whole input first, then each band of rows (with its halo) is normalized, activated and
  convolved, so the norm's full-size output never exists; conv2 writes its bands back into conv1's output
  (the halo rows the next band reads are kept aside before they are overwritten), and the shortcut is
  added band by band into it. A resnet then holds its input and one output (2 full-size tensors where it
  held 4-5: on the SD-shaped VAE at 256x256 the last up block's first resnet, 256 -> 128 channels);
- the Decoder runs its UpDecoderBlock2Ds' resnets and upsamplers itself (`_lean_decoder_forward`, the same
  calls in the same order): called as a block, the block's input stays referenced by the caller's frame
  until the block returns, i.e. across all its resnets (the 64 MiB upsampled tensor there).
Each conv output value is computed by the same kernel from the same inputs, so the banded convs and
upsamples give the same picture (bit for bit on this CPU, the tests check it). The fused GroupNorm computes
the same normalization with its own reductions (`var_mean`, then `x * scale + shift`), which rounds
differently from ATen's GroupNorm kernel in the last float32 bits: the tests bound the difference. Layers
with hooks (int8 storage, LoRA patches) keep them: a band calls the layer's own forward.
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


def _norm_scale_shift(norm: torch.nn.GroupNorm, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GroupNorm of `x` as `x * scale + shift`, (N, C, 1, 1) each: statistics over each group's whole input."""
    n, c = x.shape[:2]
    groups = norm.num_groups
    # (N, G): a reduction over each group's channels and pixels, at any strides (the mid block's attention can
    # hand on a channels-last-like layout), without a copy
    grouped = x.unflatten(1, (groups, c // groups))
    var, mean = torch.var_mean(grouped, dim=(2, 3, 4), unbiased=False)
    rstd = torch.rsqrt(var + norm.eps).repeat_interleave(c // groups, dim=1)  # (N, C)
    mean = mean.repeat_interleave(c // groups, dim=1)
    scale = rstd * norm.weight if norm.affine else rstd
    shift = -mean * scale + norm.bias if norm.affine else -mean * scale
    return scale[:, :, None, None], shift[:, :, None, None]


def _norm_silu_conv(
    norm: torch.nn.GroupNorm, conv: Callable[..., torch.Tensor], pad: int, x: torch.Tensor, *, into_x: bool
) -> torch.Tensor:
    """conv(silu(norm(x))) band by band; `into_x`: the output is written over `x` (same shape)."""
    scale, shift = _norm_scale_shift(norm, x)
    height = x.shape[-2]
    step = max(pad, _rows_per_band(x, height))
    out: torch.Tensor | None = x if into_x else None
    above: torch.Tensor | None = None  # into_x: x's rows [r0 - pad, r0) as they were before band r0 - step
    for r0 in range(0, height, step):
        r1 = min(height, r0 + step)
        s0, s1 = max(0, r0 - pad), min(height, r1 + pad)  # the band's rows and their halo
        band = x[:, :, s0:s1] if above is None else torch.cat([above, x[:, :, r0:s1]], dim=2)
        band = torch.addcmul(shift, band, scale)  # (B, C, s1 - s0, W): the norm's output rows, one copy
        F.silu(band, inplace=True)
        y = conv(band)  # row j is output row s0 + j
        del band
        if into_x and pad:
            above = x[:, :, r1 - pad : r1].clone()  # the next band's halo, before this band overwrites it
        if out is None:
            out = y.new_empty((*y.shape[:2], height, y.shape[-1]))
        out[:, :, r0:r1] = y[:, :, r0 - s0 : r1 - s0]
        del y
    assert out is not None
    return out


def lean_resnets_run(input_bytes: int, dtype: torch.dtype) -> bool:
    """Whether a ResnetBlock2D with an input of `input_bytes` runs fused in bands (the working-memory formula
    asks): float32 only (the statistics are reduced at the input's dtype) and above `BAND_BYTES`."""
    return dtype == torch.float32 and input_bytes > BAND_BYTES


def _no_module_hooks(module: torch.nn.Module | None) -> bool:
    """No torch forward hooks (streaming, patches): the fused resnet calls a conv's forward per band and reads
    a norm's weights itself, so hooks on them would be skipped. Hooks inside a forward (int8) are kept."""
    return module is None or not (module._forward_pre_hooks or module._forward_hooks)


def _lean_resnet_ok(block: torch.nn.Module) -> bool:
    shortcut = getattr(block, "conv_shortcut", None)
    parts = ("norm1", "norm2", "conv1", "conv2")
    return (
        type(block).__name__ == "ResnetBlock2D"
        and all(type(getattr(block, n, None)) is torch.nn.GroupNorm for n in ("norm1", "norm2"))
        and not any(hasattr(getattr(block, n), "_diffusers_hook") for n in ("norm1", "norm2"))
        and type(getattr(block, "nonlinearity", None)) is torch.nn.SiLU
        and getattr(block, "upsample", 1) is None
        and getattr(block, "downsample", 1) is None
        # no temb: norm2 alone ("scale_shift" needs a temb)
        and getattr(block, "time_embedding_norm", None) in ("default", "group")
        and _bandable(getattr(block, "conv1", None))
        and _bandable(getattr(block, "conv2", None))
        and block.conv2.in_channels == block.conv2.out_channels
        and (shortcut is None or (_bandable(shortcut) and shortcut.kernel_size == (1, 1)))
        and all(_no_module_hooks(getattr(block, n)) for n in parts)
        and _no_module_hooks(shortcut)
    )


def _lean_resnet(block: torch.nn.Module, forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A ResnetBlock2D's forward holding its input and one output at full size (the module docstring)."""
    conv1, conv2 = block.conv1.forward, block.conv2.forward  # their own (hooked) forwards, not banded again
    shortcut = None if block.conv_shortcut is None else block.conv_shortcut.forward
    pad1, pad2 = block.conv1.padding[0], block.conv2.padding[0]

    def run(x: torch.Tensor, temb: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        fused = x.dim() == 4 and lean_resnets_run(x.numel() * x.element_size(), x.dtype)
        plain = temb is not None or args or kwargs or not fused
        if plain or (block.training and block.dropout.p > 0):
            return forward(x, temb, *args, **kwargs)
        h = _norm_silu_conv(block.norm1, conv1, pad1, x, into_x=False)
        h = _norm_silu_conv(block.norm2, conv2, pad2, h, into_x=True)
        if shortcut is None:
            h += x  # (input + hidden): the same sum
        else:  # a 1x1 conv: each band of rows is that band of the output
            step = _rows_per_band(x, x.shape[-2])
            for r0 in range(0, x.shape[-2], step):
                h[:, :, r0 : r0 + step] += shortcut(x[:, :, r0 : r0 + step])
        if block.output_scale_factor != 1:
            h /= block.output_scale_factor
        return h

    return run


def _inlinable(block: torch.nn.Module) -> bool:
    """An UpDecoderBlock2D whose forward may be run as its resnets then its upsamplers: no hooks of its own."""
    return (
        type(block).__name__ == "UpDecoderBlock2D"
        and "forward" not in block.__dict__
        and not hasattr(block, "_diffusers_hook")
        and not (block._forward_pre_hooks or block._forward_hooks)
    )


def _lean_decoder_forward(
    decoder: torch.nn.Module, forward: Callable[..., torch.Tensor]
) -> Callable[..., torch.Tensor]:
    """diffusers' `Decoder.forward` (no latent embeds, no checkpointing) with the up blocks' loops inlined."""

    def run(sample: torch.Tensor, latent_embeds: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
        checkpointing = torch.is_grad_enabled() and getattr(decoder, "gradient_checkpointing", False)
        if latent_embeds is not None or args or kwargs or checkpointing:
            return forward(sample, latent_embeds, *args, **kwargs)
        sample = decoder.conv_in(sample)
        sample = decoder.mid_block(sample, None)
        for block in decoder.up_blocks:  # UpDecoderBlock2D.forward, one reference to `sample` at a time
            for resnet in block.resnets:
                sample = resnet(sample, temb=None)
            for upsampler in block.upsamplers or ():
                sample = upsampler(sample)
        sample = decoder.conv_norm_out(sample)
        sample = decoder.conv_act(sample)
        return decoder.conv_out(sample)

    return run


def _lean_decoder_ok(decoder: torch.nn.Module) -> bool:
    return (
        type(decoder).__name__ == "Decoder"
        and "forward" not in decoder.__dict__
        and not hasattr(decoder, "_diffusers_hook")
        and getattr(decoder, "mid_block", None) is not None
        and all(_inlinable(b) for b in getattr(decoder, "up_blocks", [None]))
        and all(hasattr(decoder, n) for n in ("conv_in", "conv_norm_out", "conv_act", "conv_out"))
    )


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
        if _lean_decoder_ok(decoder):
            swapped.append((decoder, "forward", None))
            decoder.forward = _lean_decoder_forward(decoder, decoder.forward)
        # A resnet comes before its convs: `_lean_resnet` takes their plain forwards.
        for module in decoder.modules():
            if _lean_resnet_ok(module):
                swapped.append((module, "forward", module.__dict__.get("forward")))
                module.forward = _lean_resnet(module, module.forward)
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
