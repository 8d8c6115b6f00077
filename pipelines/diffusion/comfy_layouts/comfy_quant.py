"""ComfyUI's `comfy_quant` weight files (int8 / int8 ConvRot, NVFP4 / NVFP4 AWQ, MXFP8, fp8): read dequantized.

Lives here: `QuantLayer`, `QuantFormatError`, `read_markers`, `quant_layers`, `dequantized_state`,
`dequantize_loaded`, `describe`,
the per-format `dequantize_*` functions and the math they share (`hadamard`, `unswizzle`, `E2M1_VALUES`).
May import: stdlib, json, torch (nothing of Nodeloom: `lazy_load.header_stubs` calls it for every file).

The facts, from ComfyUI (comfy/ops.py `_load_quantized_module`, comfy/quant_ops.py `QUANT_ALGOS`, comfy/utils.py)
and comfy-kitchen (comfy_kitchen/tensor/{int8,nvfp4,mxfp8}.py, backends/eager/quantization.py, float_utils.py,
tensor/int8_utils.py), read 2026-12:

- **Markers.** A quantized layer `<l>` (its weight `<l>.weight`) has `<l>.comfy_quant`: a uint8 tensor holding
  JSON bytes, e.g. `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`. Older files
  instead carry `__metadata__["_quantization_metadata"]` = `{"format_version": "1.0", "layers": {"<l>":
  {"format": ...}}}` (ComfyUI turns it into the markers at load). `convrot*` may sit flat or under `"params"`;
  `full_precision_matrix_mult` is a compute hint (ignored here); a marker without `"format"` (ComfyUI-INT8-Fast's
  old `int8_w8a8`) is refused, as ComfyUI does. Layers without a marker are plain tensors. A "mixed" file
  (`*_fp4_mixed`, `*_mixed`) is one with different formats per layer: each marker is read on its own.
- **float8_e4m3fn / float8_e5m2**: `weight` fp8 (or a U8 container), `weight_scale` f32 (one value, or one per
  row); `input_scale` is for activations (dropped). W = weight.float() * scale.
- **int8_tensorwise**: `weight` I8 `[out, in]`; `weight_scale` f32 of shape `[]`/`[1]` (per tensor) or
  `[out]`/`[out, 1]` (per row). W = weight.float() * scale.
  With `convrot` (the released `*_int8_convrot` files): the stored rows are the weight rotated before the
  per-row quantization, W_rot = W_g @ H^T, per group g of G consecutive input columns (`convrot_groupsize`,
  default 256, a power of 4), H = H4 (x) H4 (x) ... / sqrt(G) with H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],
  [-1,1,1,1]] (a "regular" Hadamard matrix: symmetric and orthogonal, so H^T = H = H^-1). ComfyUI runs it by
  rotating the activations the same way (x_g @ H) before an int8 matmul; read here, the rotation is undone
  instead: W_g = (weight.float() * scale)_g @ H. An int8 embedding table is rotated the same way along its row.
- **nvfp4**: `weight` U8 `[rows, cols / 2]`, two E2M1 codes a byte, the even column in the high nibble
  (comfy-kitchen's `hi_first=True`, its default and ComfyUI's); a code is sign (bit 3) and magnitude
  (0, 0.5, 1, 1.5, 2, 3, 4, 6). `weight_scale` F8_E4M3 (or U8 viewed so): one scale per 16 consecutive columns,
  stored in cuBLAS's swizzled block layout `[roundup(rows, 128), roundup(cols / 16, 4)]` (128x4 tiles, each
  stored as 32 x (4 x 4): `unswizzle`). `weight_scale_2` f32: one global scale. W = e2m1 * block * global.
  Rows and columns are padded to 16; the stored (padded) shape is what is read, so a layer whose sides are not
  multiples of 16 fails the loader's shape check (the layers of the models named here are multiples of 16).
  **AWQ** (`*_nvfp4_awq`): the same marker, plus `pre_quant_scale` `[in]` (bf16) on some layers; ComfyUI
  multiplies the input by it (y = W (x * s)), so the effective weight is W * s[None, :].
- **mxfp8**: `weight` F8_E4M3 `[rows, cols]` (padded to 32); `weight_scale` E8M0 exponents (U8 or F8_E8M0),
  one per 32 columns, swizzled as nvfp4's; scale = 2^(e - 127), e = 0 read as 0 (comfy-kitchen's
  `e8m0_to_f32`). W = weight.float() * scale.
- MoE banks (`num_experts` in the marker) carry a leading expert dim; the same math applies per expert.

Everything is dequantized to float32 at read time, one tensor at a time: `dequantized_state` replaces each
quantized weight by `record(fn, args, kwargs, shape)` (a recipe op on header stubs, see `lazy_load`; or the
tensor itself when called on real tensors), so no whole file is ever held in float.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

MARKER_SUFFIX = ".comfy_quant"
METADATA_KEY = "_quantization_metadata"
FORMATS = ("float8_e4m3fn", "float8_e5m2", "int8_tensorwise", "nvfp4", "mxfp8")
# Side tensors of a quantized layer, dropped once the weight is dequantized (input_scale: activations only).
_SIDE = ("weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale", "comfy_quant")
# The scale tensors each format cannot do without.
_NEEDS = {"nvfp4": ("weight_scale", "weight_scale_2")}
NVFP4_BLOCK, MXFP8_BLOCK = 16, 32
# E2M1 codes 0..15 -> values: bit 3 is the sign, bits 0-2 index the magnitudes.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
E8M0_BIAS = 127

Record = Callable[[Callable[..., torch.Tensor], tuple[Any, ...], dict[str, Any], tuple[int, ...]], Any]


class QuantFormatError(ValueError):
    """A `comfy_quant` layer this reader cannot dequantize (unknown format, missing scale)."""


@dataclass(frozen=True)
class QuantLayer:
    """One quantized layer of a file: its name (the weight's, less `.weight`), format and marker JSON."""

    layer: str
    format: str
    conf: Mapping[str, Any]

    @property
    def weight_key(self) -> str:
        return f"{self.layer}.weight"

    def side(self, name: str) -> str:
        return f"{self.layer}.{name}"

    @property
    def rotation(self) -> int:
        """The ConvRot group size, or 0 when the layer is not rotated."""
        params = self.conf.get("params")
        params = params if isinstance(params, dict) else {}
        if not self.conf.get("convrot", params.get("convrot", False)):
            return 0
        return int(self.conf.get("convrot_groupsize", params.get("convrot_groupsize", 256)))

    @property
    def label(self) -> str:
        return f"{self.format} convrot" if self.format == "int8_tensorwise" and self.rotation else self.format


def _marker_json(raw: bytes, where: str) -> dict[str, Any]:
    try:
        conf = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise QuantFormatError(f"{where}: the comfy_quant marker is not JSON ({exc})") from None
    if not isinstance(conf, dict):
        raise QuantFormatError(f"{where}: the comfy_quant marker is not a JSON object")
    return conf


def read_markers(handle: Any, keys: Iterable[str], file_name: str) -> dict[str, dict[str, Any]]:
    """layer -> marker JSON, from a safetensors `handle` (`safe_open`): the `comfy_quant` tensors among `keys`,
    else the file's `_quantization_metadata`. {} for a file with neither (a plain one)."""
    markers: dict[str, dict[str, Any]] = {}
    for key in keys:
        if key.endswith(MARKER_SUFFIX):
            raw = handle.get_tensor(key).to(torch.uint8).numpy().tobytes()
            markers[key.removesuffix(MARKER_SUFFIX)] = _marker_json(raw, f"{file_name}: {key}")
    if markers:
        return markers
    blob = (handle.metadata() or {}).get(METADATA_KEY)
    if not blob:
        return {}
    meta = _marker_json(blob.encode("utf-8"), f"{file_name}: {METADATA_KEY}")
    layers = meta.get("layers")
    if not isinstance(layers, dict):
        raise QuantFormatError(f"{file_name}: {METADATA_KEY} has no 'layers' object")
    return {
        k.removesuffix(".weight"): dict(v) if isinstance(v, dict) else {"format": v}
        for k, v in layers.items()
    }


def quant_layers(
    markers: Mapping[str, Mapping[str, Any]], keys: Iterable[str], file_name: str
) -> dict[str, QuantLayer]:
    """weight key -> its `QuantLayer`, for the marked layers whose weight is among `keys`; raises
    `QuantFormatError` naming the file, the tensor and the format for a layer this reader cannot read."""
    present = set(keys)
    out: dict[str, QuantLayer] = {}
    for layer, conf in markers.items():
        quant = QuantLayer(layer, str(conf.get("format", "")), conf)
        if quant.weight_key not in present:
            continue  # another component's layer (a prefix filter), or a marker without its weight
        if quant.format not in FORMATS:
            shown = repr(quant.format) if quant.format else "none (the marker has no 'format')"
            raise QuantFormatError(
                f"{file_name}: tensor {quant.weight_key} is quantized as {shown}, which Nodeloom cannot read "
                f"(it reads {', '.join(FORMATS)})"
            )
        for name in ("weight_scale", *_NEEDS.get(quant.format, ())):
            if quant.side(name) not in present:
                raise QuantFormatError(f"{file_name}: {quant.format} tensor {quant.weight_key} has no {name}")
        if quant.rotation and (
            quant.rotation < 4 or 4 ** round(math.log(quant.rotation, 4)) != quant.rotation
        ):
            raise QuantFormatError(
                f"{file_name}: tensor {quant.weight_key}: convrot_groupsize {quant.rotation} is not a power of 4"
            )
        out[quant.weight_key] = quant
    return out


def describe(layers: Mapping[str, QuantLayer]) -> str:
    """ "int8_tensorwise convrot x200, nvfp4 x12" (most common first), or "" for none."""
    counts: dict[str, int] = {}
    for quant in layers.values():
        counts[quant.label] = counts.get(quant.label, 0) + 1
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


# --- the math -----------------------------------------------------------------------------------------


def hadamard(size: int) -> torch.Tensor:
    """ConvRot's normalized regular Hadamard matrix (size a power of 4): symmetric, orthogonal."""
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float32)
    h = h4
    while h.shape[0] < size:
        h = torch.kron(h, h4)
    assert h.shape[0] == size, f"Hadamard size {size} is not a power of 4"
    return h / math.sqrt(size)


def rotate_rows(w: torch.Tensor, group: int) -> torch.Tensor:
    """Each row's groups of `group` columns times H (ConvRot's rotation; its own inverse)."""
    assert w.shape[-1] % group == 0, f"{w.shape[-1]} columns are not groups of {group}"
    grouped = w.reshape(*w.shape[:-1], w.shape[-1] // group, group)  # (..., n_groups, G)
    return (grouped @ hadamard(group)).reshape(w.shape)


def unswizzle(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """cuBLAS's block-scale layout -> the plain `[rows, cols]` scales (one per block of a row).

    The padded `[128 * nr, 4 * nc]` grid is stored as 128x4 tiles, row-tile major; a tile's element at row
    32 * i + j, column c is stored at position (j, i, c) of its 32 x 4 x 4 block."""
    nr, nc = -(-rows // 128), -(-cols // 4)
    tiles = blocked.reshape(nr, nc, 32, 4, 4)  # (row tile, col tile, j, i, c)
    return tiles.permute(0, 3, 2, 1, 4).reshape(nr * 128, nc * 4)[:rows, :cols]


def swizzle(scales: torch.Tensor) -> torch.Tensor:
    """The inverse of `unswizzle`: plain `[rows, cols]` scales -> the padded swizzled grid."""
    rows, cols = scales.shape
    nr, nc = -(-rows // 128), -(-cols // 4)
    padded = torch.zeros((nr * 128, nc * 4), dtype=scales.dtype)
    padded[:rows, :cols] = scales
    tiles = padded.reshape(nr, 4, 32, nc, 4)  # (row tile, i, j, col tile, c)
    return tiles.permute(0, 3, 2, 1, 4).reshape(nr * 128, nc * 4)


def _per_expert(fn: Callable[..., torch.Tensor], weight: torch.Tensor, *scales: torch.Tensor) -> torch.Tensor:
    """`fn` on each expert of a `[E, rows, cols]` bank (scales with a leading expert dim), or on the matrix."""
    if weight.ndim == 2:
        return fn(weight, *scales)
    return torch.stack(
        [fn(weight[e], *(s[e] if s.ndim else s for s in scales)) for e in range(weight.shape[0])]
    )


def dequantize_fp8(weight: torch.Tensor, scale: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    w = weight.view(fp8) if weight.dtype == torch.uint8 else weight
    return w.to(torch.float32) * _row_scale(scale.to(torch.float32), w.shape)


def _row_scale(scale: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A per-tensor scale as is; one value per row (`[rows]` or `[rows, 1]`) as a column to broadcast."""
    if scale.numel() == 1:
        return scale.reshape(())
    assert scale.numel() == math.prod(shape[:-1]), (
        f"scale of {scale.numel()} values for a weight {list(shape)}"
    )
    return scale.reshape(*shape[:-1], 1)


def dequantize_int8(weight: torch.Tensor, scale: torch.Tensor, *, group: int = 0) -> torch.Tensor:
    w = weight.to(torch.float32) * _row_scale(scale.to(torch.float32), weight.shape)
    return rotate_rows(w, group) if group else w


def _nvfp4_matrix(packed: torch.Tensor, block: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    rows, cols = packed.shape[0], packed.shape[1] * 2
    e2m1 = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    byte = torch.arange(256)
    pairs = torch.stack(
        [e2m1[byte >> 4], e2m1[byte & 0x0F]], dim=-1
    )  # a byte's two values, even column: high
    values = pairs[packed.int()].reshape(rows, cols)  # one lookup a byte (int32 index: half int64's memory)
    block = block.view(torch.float8_e4m3fn) if block.dtype == torch.uint8 else block
    scales = unswizzle(block, rows, cols // NVFP4_BLOCK).to(torch.float32) * global_scale.to(torch.float32)
    return (values.reshape(rows, -1, NVFP4_BLOCK) * scales.unsqueeze(-1)).reshape(rows, cols)


def dequantize_nvfp4(
    packed: torch.Tensor,
    block: torch.Tensor,
    global_scale: torch.Tensor,
    pre_quant_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    glob = global_scale.reshape(()) if global_scale.numel() == 1 else global_scale.reshape(-1)  # per expert
    w = _per_expert(_nvfp4_matrix, packed, block, glob)
    return w if pre_quant_scale is None else w * pre_quant_scale.to(torch.float32).unsqueeze(-2)


def _mxfp8_matrix(weight: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    rows, cols = weight.shape
    exponents = unswizzle(block.view(torch.uint8), rows, cols // MXFP8_BLOCK).to(torch.int32)
    scales = torch.where(exponents == 0, 0.0, torch.exp2((exponents - E8M0_BIAS).to(torch.float32)))
    w = weight.view(torch.float8_e4m3fn) if weight.dtype == torch.uint8 else weight
    return (w.to(torch.float32).reshape(rows, -1, MXFP8_BLOCK) * scales.unsqueeze(-1)).reshape(rows, cols)


def dequantize_mxfp8(weight: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    return _per_expert(_mxfp8_matrix, weight, block)


def _fp8_of(fmt: str) -> torch.dtype:
    return torch.float8_e5m2 if fmt == "float8_e5m2" else torch.float8_e4m3fn


def dequantized_state(
    state: Mapping[str, Any], layers: Mapping[str, QuantLayer], record: Record | None = None
) -> dict[str, Any]:
    """`state` with each quantized weight dequantized to float32 and its side tensors dropped.

    `record(fn, args, kwargs, shape)` makes the entry: on header stubs it records the op into the tensor's
    recipe (`lazy_load`); by default (real tensors) it calls `fn`."""
    make = record or (lambda fn, args, kwargs, shape: fn(*args, **kwargs))
    side = {q.side(name) for q in layers.values() for name in _SIDE}
    out: dict[str, Any] = {}
    for key, t in state.items():
        if key in side or key.endswith(MARKER_SUFFIX):
            continue
        quant = layers.get(key)
        if quant is None:
            out[key] = t
            continue
        shape = tuple(t.shape)
        scale = state[quant.side("weight_scale")]
        if quant.format == "int8_tensorwise":
            out[key] = make(dequantize_int8, (t, scale), {"group": quant.rotation}, shape)
        elif quant.format == "nvfp4":
            pre = state.get(quant.side("pre_quant_scale"))
            args = (t, scale, state[quant.side("weight_scale_2")], pre)
            out[key] = make(dequantize_nvfp4, args, {}, (*shape[:-1], shape[-1] * 2))
        elif quant.format == "mxfp8":
            out[key] = make(dequantize_mxfp8, (t, scale), {}, shape)
        else:
            out[key] = make(dequantize_fp8, (t, scale, _fp8_of(quant.format)), {}, shape)
    return out


def dequantize_loaded(
    state: Mapping[str, torch.Tensor], file_name: str, metadata: Mapping[str, str] | None = None
) -> dict[str, torch.Tensor]:
    """A state dict read whole (`safetensors.torch.load_file`; `metadata`: the file's) with its quantized
    layers dequantized and side tensors dropped; a plain one comes back as it is. For loaders that do not go
    through `lazy_load` (those get it per tensor, from `header_stubs`)."""

    class _Loaded:
        def get_tensor(self, key: str) -> torch.Tensor:
            return state[key]

        def metadata(self) -> Mapping[str, str] | None:
            return metadata

    markers = read_markers(_Loaded(), state, file_name)
    return dequantized_state(state, quant_layers(markers, state, file_name)) if markers else dict(state)
