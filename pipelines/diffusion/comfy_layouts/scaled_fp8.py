"""ComfyUI's fp8 "scaled" weight files (`*_fp8_scaled.safetensors`): read them dequantized, write them for tests.

Lives here: `SCALE_SUFFIXES`, `is_scaled_fp8`, `dequantize_stubs`, `scaled_fp8_state`. May import: stdlib,
json, torch.

Two forms exist (ComfyUI comfy/ops.py and comfy/utils.py):
- the current one: each quantized Linear has `<layer>.weight` in float8_e4m3fn, `<layer>.weight_scale` (float32,
  one value), a `<layer>.comfy_quant` tensor holding JSON bytes (`{"format": "float8_e4m3fn"}`) and maybe
  `<layer>.input_scale` (for fp8 matmuls); the weight is `weight.to(dtype) * weight_scale`
  (TensorCoreFP8Layout's dequantize);
- the older one: a `scaled_fp8` marker tensor, `<layer>.scale_weight` (and `scale_input`), same meaning.
Every other tensor (norms, biases, embeddings) is stored plainly. The current form's `comfy_quant` layers are
already dequantized by `lazy_load.header_stubs` (`comfy_quant`, with ComfyUI's other formats); `dequantize_stubs`
reads the older form (and is a no-op on stubs that are dequantized already). The loader dequantizes at read time: the
scale multiply is part of each tensor's recipe (`lazy_load`), traced on header stubs like any rename, so a
qkv split sees the dequantized weight. The model then runs at the compute dtype (or in our own 8-bit
storage when the loader's dtype asks for it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch

SCALE_SUFFIXES = (".weight_scale", ".scale_weight")
_DROPPED = (".input_scale", ".scale_input", ".comfy_quant", ".weight_scale_2")
_MARKERS = ("scaled_fp8",)


def _is_marker(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in _MARKERS


def is_scaled_fp8(keys: list[str] | Mapping[str, object]) -> bool:
    return any(k.endswith(SCALE_SUFFIXES) or _is_marker(k) for k in keys)


def _scale_for(weight_key: str, keys: Mapping[str, object]) -> str | None:
    base = weight_key.removesuffix(".weight")
    return next((base + s for s in SCALE_SUFFIXES if base + s in keys), None)


def dequantize_stubs(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with every scaled weight replaced by `weight.float() * scale` and the scale keys dropped.

    Works on header stubs (the ops are recorded into recipes) and on real tensors alike.
    """
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if key.endswith(SCALE_SUFFIXES + _DROPPED) or _is_marker(key):
            continue
        scale_key = _scale_for(key, state) if key.endswith(".weight") else None
        if scale_key is None:
            out[key] = t
            continue
        scale = state[scale_key].to(torch.float32)
        if scale.numel() > 1:  # one scale per output row
            scale = scale.reshape(-1, *([1] * (t.ndim - 1)))
        out[key] = t.to(torch.float32) * scale
    return out


# The largest finite float8_e4m3fn value: a weight's absmax maps to it.
E4M3_MAX = 448.0


def scaled_fp8_state(state: Mapping[str, torch.Tensor], *, legacy: bool = False) -> dict[str, torch.Tensor]:
    """`state` as ComfyUI writes an fp8-scaled file: every 2-D weight in float8_e4m3fn with its scale.

    `legacy`: the older form (`scale_weight` plus the `scaled_fp8` marker), else the current one
    (`weight_scale` plus `comfy_quant`). Norms, biases and other tensors stay as they are.
    """
    out: dict[str, torch.Tensor] = {}
    quant_conf = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8)
    for key, t in state.items():
        if not (key.endswith(".weight") and t.ndim == 2 and t.is_floating_point()):
            out[key] = t
            continue
        base = key.removesuffix(".weight")
        absmax = t.detach().abs().max().float().clamp(min=1e-12)
        scale = (absmax / E4M3_MAX).reshape(())
        out[key] = (t.float() / scale).to(torch.float8_e4m3fn)
        if legacy:
            out[base + ".scale_weight"] = scale.reshape(1)
        else:
            out[base + ".weight_scale"] = scale
            out[base + ".comfy_quant"] = quant_conf.clone()
    if legacy:
        out["scaled_fp8"] = torch.zeros(0, dtype=torch.float8_e4m3fn)
    return out
