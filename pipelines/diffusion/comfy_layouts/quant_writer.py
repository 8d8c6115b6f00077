"""Writing ComfyUI's `comfy_quant` layouts (for tests and demos): a float state dict quantized as ComfyUI stores it.

Lives here: `QUANT_FORMATS`, `convrot_group`, `quantize_int8`, `quantize_nvfp4`, `quantize_mxfp8`,
`comfy_quant_state`, `fake_quantized`. May import: stdlib, json, torch, pipelines.diffusion.comfy_layouts.comfy_quant
(the reader, whose module docstring has the format facts these writers follow).

The quantizers follow comfy-kitchen's eager ones: int8 rounds to nearest with a per-row absmax / 127 scale
(per tensor when asked), ConvRot rotates each row's groups first; NVFP4 picks the global scale absmax / (448 * 6),
each 16-block's scale (absmax / 6) / global rounded to float8_e4m3fn, and each value the nearest E2M1 code;
MXFP8 picks each 32-block's exponent ceil(log2(absmax / 448)) and rounds to float8_e4m3fn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import torch

from pipelines.diffusion.comfy_layouts.comfy_quant import (
    E2M1_VALUES,
    E8M0_BIAS,
    MXFP8_BLOCK,
    NVFP4_BLOCK,
    QuantLayer,
    dequantized_state,
    rotate_rows,
    swizzle,
)

# The layouts `comfy_quant_state` writes: "int8" (per-row scales), "int8_tensor" (one scale), "int8_convrot"
# (the released files' form), "nvfp4", "mxfp8", "fp8" (float8_e4m3fn with a comfy_quant marker).
QUANT_FORMATS = ("int8", "int8_tensor", "int8_convrot", "nvfp4", "mxfp8", "fp8")
F4_MAX, F8_MAX = 6.0, 448.0


def convrot_group(in_features: int, largest: int = 256) -> int:
    """The ConvRot group for a row of `in_features`: the largest power of 4 (<= `largest`) dividing it; 0 if
    none does (such a layer is written unrotated, as ComfyUI's converters do)."""
    group = largest
    while group >= 4:
        if in_features % group == 0:
            return group
        group //= 4
    return 0


def marker(conf: Mapping[str, object]) -> torch.Tensor:
    """A `comfy_quant` tensor: the JSON bytes as uint8."""
    return torch.tensor(list(json.dumps(dict(conf)).encode("utf-8")), dtype=torch.uint8)


def quantize_int8(
    w: torch.Tensor, *, per_row: bool = True, group: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 weight, float32 scale `[rows, 1]` or `[]`), rotated first when `group` (ConvRot)."""
    w = w.detach().to(torch.float32)
    if group:
        w = rotate_rows(w, group)
    absmax = w.abs().amax(dim=-1, keepdim=True) if per_row else w.abs().max()
    scale = (absmax / 127.0).clamp(min=1e-30)
    return (w / scale).round().clamp(-128, 127).to(torch.int8), scale


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """The nearest E2M1 code (0..15) of each value of `x` (already within +-6)."""
    magnitudes = torch.tensor(E2M1_VALUES[:8], dtype=torch.float32)
    index = (x.abs().unsqueeze(-1) - magnitudes).abs().argmin(dim=-1)
    return (index + 8 * (x < 0).long()).to(torch.uint8)


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed uint8 `[rows, cols / 2]`, swizzled float8_e4m3fn block scales, float32 global scale) of a
    `[rows, cols]` weight whose sides are multiples of 16."""
    w = w.detach().to(torch.float32)
    rows, cols = w.shape
    assert rows % 16 == 0 and cols % NVFP4_BLOCK == 0, (
        f"NVFP4 wants sides that are multiples of 16, not {w.shape}"
    )
    global_scale = (w.abs().max() / (F8_MAX * F4_MAX)).clamp(min=1e-30)
    blocks = w.reshape(rows, -1, NVFP4_BLOCK)
    block_scale = (
        (blocks.abs().amax(dim=-1) / F4_MAX / global_scale).clamp(max=F8_MAX).to(torch.float8_e4m3fn)
    )
    total = block_scale.to(torch.float32) * global_scale
    scaled = torch.where(total.unsqueeze(-1) == 0, 0.0, blocks / total.unsqueeze(-1).clamp(min=1e-30))
    codes = _e2m1_codes(scaled.clamp(-F4_MAX, F4_MAX).reshape(rows, cols))
    packed = (codes[:, 0::2] << 4) | codes[:, 1::2]  # the even column in the high nibble
    return packed, swizzle(block_scale), global_scale.reshape(())


def quantize_mxfp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn weight, swizzled uint8 E8M0 exponents) of a `[rows, cols]` weight, cols a multiple of 32."""
    w = w.detach().to(torch.float32)
    rows, cols = w.shape
    assert cols % MXFP8_BLOCK == 0, f"MXFP8 wants columns in blocks of 32, not {cols}"
    blocks = w.reshape(rows, -1, MXFP8_BLOCK)
    absmax = blocks.abs().amax(dim=-1)
    exponent = torch.ceil(torch.log2((absmax / F8_MAX).clamp(min=2.0**-127))).to(torch.int32) + E8M0_BIAS
    exponent = torch.where(absmax == 0, 0, exponent.clamp(1, 254))
    scale = torch.where(exponent == 0, 1.0, torch.exp2((exponent - E8M0_BIAS).to(torch.float32)))
    q = (blocks / scale.unsqueeze(-1)).clamp(-F8_MAX, F8_MAX).reshape(rows, cols).to(torch.float8_e4m3fn)
    return q, swizzle(exponent.to(torch.uint8))


def _quantizable(fmt: str, key: str, t: torch.Tensor) -> bool:
    if not (key.endswith(".weight") and t.ndim == 2 and t.is_floating_point()):
        return False
    if fmt == "nvfp4":
        return t.shape[0] % 16 == 0 and t.shape[1] % NVFP4_BLOCK == 0
    if fmt == "mxfp8":
        return t.shape[1] % MXFP8_BLOCK == 0
    return True


def comfy_quant_state(
    state: Mapping[str, torch.Tensor],
    fmt: str,
    *,
    select: Callable[[str], bool] | None = None,
    awq: Callable[[str], bool] | None = None,
) -> dict[str, torch.Tensor]:
    """`state` as ComfyUI writes a `fmt` file (one of `QUANT_FORMATS`): every 2-D float `.weight` the format
    can hold (and `select` accepts) quantized, with its scales and `comfy_quant` marker; the rest as it is.

    `awq` (nvfp4): the layers that get an AWQ `pre_quant_scale` (a fixed smooth ramp, 0.75..1.25): the weight
    is stored divided by it, so weight * scale reads back the original."""
    if fmt not in QUANT_FORMATS:
        raise ValueError(f"unknown quantization {fmt!r}; known: {', '.join(QUANT_FORMATS)}")
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if not _quantizable(fmt, key, t) or (select is not None and not select(key)):
            out[key] = t
            continue
        layer = key.removesuffix(".weight")
        if fmt.startswith("int8"):
            group = convrot_group(t.shape[1]) if fmt == "int8_convrot" else 0
            out[key], out[f"{layer}.weight_scale"] = quantize_int8(
                t, per_row=fmt != "int8_tensor", group=group
            )
            conf = {
                "format": "int8_tensorwise",
                **({"convrot": True, "convrot_groupsize": group} if group else {}),
            }
        elif fmt == "nvfp4":
            w = t.detach().to(torch.float32)
            if awq is not None and awq(key):
                pre = 1.0 + 0.25 * torch.sin(torch.arange(w.shape[1], dtype=torch.float32))
                out[f"{layer}.pre_quant_scale"] = pre.to(torch.bfloat16)
                w = w / out[f"{layer}.pre_quant_scale"].to(torch.float32)
            out[key], out[f"{layer}.weight_scale"], out[f"{layer}.weight_scale_2"] = quantize_nvfp4(w)
            conf = {"format": "nvfp4"}
        elif fmt == "mxfp8":
            out[key], out[f"{layer}.weight_scale"] = quantize_mxfp8(t)
            conf = {"format": "mxfp8"}
        else:
            scale = (t.detach().abs().max().float() / F8_MAX).clamp(min=1e-30)
            out[key] = (t.detach().float() / scale).to(torch.float8_e4m3fn)
            out[f"{layer}.weight_scale"] = scale.reshape(())
            conf = {"format": "float8_e4m3fn"}
        out[f"{layer}.comfy_quant"] = marker(conf)
    return out


def _layers_of(state: Mapping[str, torch.Tensor]) -> dict[str, QuantLayer]:
    layers = {}
    for key, t in state.items():
        if key.endswith(".comfy_quant"):
            conf = json.loads(bytes(t.tolist()).decode("utf-8"))
            quant = QuantLayer(key.removesuffix(".comfy_quant"), conf["format"], conf)
            layers[quant.weight_key] = quant
    return layers


def fake_quantized(state: Mapping[str, torch.Tensor], fmt: str, **kwargs: object) -> dict[str, torch.Tensor]:
    """`state` quantized as `fmt` and read back (float32 where quantized): the weights a run from such a file
    uses, under the same names."""
    stored = comfy_quant_state(state, fmt, **kwargs)  # type: ignore[arg-type]
    return dequantized_state(stored, _layers_of(stored))
