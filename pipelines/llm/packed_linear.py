"""GGUF blocks repacked for torch's own low-bit CPU matmuls, and the layers that multiply with them.

Lives here: `repack_blocks` (a GGUF tensor's rows -> `PackedWeight`), `PackedWeight`, `PackedLinear`,
`PackedEmbedding`, `PACK_GROUP`, `packed_kernels_work`. Imports numpy, torch and gguf-py's type enum
and dequantizer; nothing from Nodeloom.

Two formats, both multiplied without dequantizing the weight (measured in `benchmarks/llm_vs_llamacpp.py`):

- **int4** (`torch._weight_int4pack_mm_for_cpu`): 4-bit codes q in 0..15 packed by
  `torch._convert_weight_to_int4pack_for_cpu`, groups of `PACK_GROUP` = 32 along K, and a
  `(K/32, N, 2)` bfloat16 table of (scale, zero) per group; the kernel computes w = (q - 8) * scale + zero
  (checked by experiment on torch 2.13). GGUF Q4_0 (w = d * (q - 8)) maps exactly: scale = d, zero = 0;
  Q4_1 (w = d * q + m): scale = d, zero = m + 8 d; Q4_K's 32-value sub-blocks (w = d sc q - dmin m): scale
  d sc, zero 8 d sc - dmin m. The codes are the file's own; only the scales and zeros are rounded to
  bfloat16 (the kernel takes no other type).
- **int8** (`torch._weight_int8pack_mm`): int8 codes with one bfloat16 scale per output row. GGUF Q8_0
  has one scale per 32 values, so its rows are requantized to one scale per row (the rounding this costs
  is measured in tests/test_llm_packed.py); F16/F32 and other quantizations are dequantized once and
  quantized the same way.

Both kernels are fast only with bfloat16 activations on this CPU (float32 activations take a scalar path,
~40x slower), so a layer casts its input to bfloat16 and its output back: that rounding is the main
quality cost, not the weights (see the module's tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

PACK_GROUP = 32  # GGUF's block size for Q4_0/Q4_1/Q8_0; one of the group sizes the int4 kernel takes
_Q = GGMLQuantizationType
# Bytes per block: Q4_0/Q4_1 are 32 values, float16 d (and m for Q4_1) before 16 bytes of nibbles.
_INT4_BLOCK_BYTES = {_Q.Q4_0: 18, _Q.Q4_1: 20, _Q.Q4_K: 144}  # Q4_K: per 256 values


@dataclass
class PackedWeight:
    """One weight in a packed format: "int4" (data uint8 (N, K/2), aux (K/32, N, 2)) or "int8" (data
    int8 (N, K), aux (N,) scales). Both aux tables are bfloat16."""

    kind: str
    data: torch.Tensor
    aux: torch.Tensor
    out_features: int
    in_features: int

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size() + self.aux.numel() * self.aux.element_size()

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.{self.kind}": self.data, f"{prefix}.{self.kind}_aux": self.aux}


def _int4_codes_and_scales(rows: np.ndarray, qtype: GGMLQuantizationType) -> tuple[np.ndarray, np.ndarray]:
    """(N, blocks*bytes) Q4_0/Q4_1/Q4_K rows -> codes (N, K) int32 in 0..15 and (N, K/32, 2) float32
    (scale, zero) for w = (q - 8) * scale + zero."""
    n = rows.shape[0]
    if qtype == _Q.Q4_K:
        return _q4_k_codes_and_scales(rows)
    size = _INT4_BLOCK_BYTES[qtype]
    blocks = rows.reshape(n, -1, size)  # (N, B, bytes)
    d = blocks[:, :, 0:2].copy().view(np.float16).astype(np.float32)[..., 0]  # (N, B)
    if qtype == _Q.Q4_1:
        m = blocks[:, :, 2:4].copy().view(np.float16).astype(np.float32)[..., 0]
        zero = m + 8.0 * d
    else:
        zero = np.zeros_like(d)
    qs = blocks[:, :, size - 16 :]  # (N, B, 16): low nibbles are values 0..15, high nibbles 16..31
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int32)  # (N, B, 32)
    return codes.reshape(n, -1), np.stack([d, zero], axis=-1)


def _q4_k_codes_and_scales(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K: 256-value super-blocks (float16 d, dmin, 12 bytes of 6-bit sub-scales/mins, 128 bytes of codes)
    of eight 32-value sub-blocks with w = d*sc*q - dmin*m: the same 4-bit codes, scale d*sc, zero 8*d*sc - dmin*m."""
    from gguf.quants import Q4_K

    n = rows.shape[0]
    blocks = rows.reshape(-1, _INT4_BLOCK_BYTES[_Q.Q4_K])  # (N*B, 144)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # (N*B, 1)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])  # (N*B, 8) each
    qs = blocks[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    # sub-block j is the low (even j) or high (odd j) nibbles of 32 bytes
    codes = (qs & 0x0F).reshape(n, -1).astype(np.int32)
    scale = d * sc.astype(np.float32)
    zero = 8.0 * scale - dmin * m.astype(np.float32)
    return codes, np.stack([scale, zero], axis=-1).reshape(n, -1, 2)


def _int8_rows(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) float32 -> int8 codes and one scale per row (symmetric, max |w| -> 127)."""
    scale = np.abs(weights).max(axis=1) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.clip(np.rint(weights / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def repack_blocks(
    rows: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int], *, prefer: str = "auto"
) -> PackedWeight:
    """A GGUF tensor (its (N, bytes) rows, as gguf-py maps them) -> a packed weight of `shape` (N, K).

    Q4_0/Q4_1 keep their codes as int4 (unless `prefer="int8"`); everything else becomes int8 rows."""
    n, k = shape
    # the int4 packer needs N to be a multiple of 16; other shapes take the int8 path
    if qtype in _INT4_BLOCK_BYTES and prefer != "int8" and k % PACK_GROUP == 0 and n % 16 == 0:
        codes, scales = _int4_codes_and_scales(rows, qtype)
        data = torch._convert_weight_to_int4pack_for_cpu(torch.from_numpy(codes), 1)
        aux = torch.from_numpy(np.ascontiguousarray(scales.transpose(1, 0, 2))).to(torch.bfloat16)
        return PackedWeight("int4", data, aux, n, k)
    weights = dequantize(rows, qtype).astype(np.float32, copy=False).reshape(n, k)
    codes, scale = _int8_rows(weights)
    return PackedWeight("int8", torch.from_numpy(codes), torch.from_numpy(scale).to(torch.bfloat16), n, k)


def packed_from_tensors(kind: str, data: torch.Tensor, aux: torch.Tensor) -> PackedWeight:
    """Rebuild a `PackedWeight` from the two tensors `PackedWeight.tensors` stored."""
    n = data.shape[0]
    k = data.shape[1] * 2 if kind == "int4" else data.shape[1]
    return PackedWeight(kind, data, aux, n, k)


def packed_matmul(x: torch.Tensor, w: PackedWeight) -> torch.Tensor:
    """x (M, K) -> (M, N) in x's dtype; the kernels run on bfloat16 activations."""
    xb = x.to(torch.bfloat16)
    if w.kind == "int4":
        y = torch._weight_int4pack_mm_for_cpu(xb, w.data, PACK_GROUP, w.aux)
    else:
        y = torch._weight_int8pack_mm(xb, w.data, w.aux)
    return y.to(x.dtype)


def dequantize_packed(w: PackedWeight) -> torch.Tensor:
    """The float32 (N, K) weight the kernel multiplies by (for tests and the embedding): identity @ w^T."""
    eye = torch.eye(w.in_features, dtype=torch.bfloat16)
    if w.kind == "int4":
        return torch._weight_int4pack_mm_for_cpu(eye, w.data, PACK_GROUP, w.aux).float().T.contiguous()
    return w.data.float() * w.aux.float()[:, None]


class _Packed(torch.nn.Module):
    """Holds a `PackedWeight` as two buffers, so the memory manager counts and moves them (a tied table
    registered in two modules is one storage, counted once)."""

    def __init__(self, weight: PackedWeight) -> None:
        super().__init__()
        self.kind = weight.kind
        self.in_features = weight.in_features
        self.out_features = weight.out_features
        self.register_buffer("data", weight.data, persistent=False)
        self.register_buffer("aux", weight.aux, persistent=False)

    @property
    def weight(self) -> PackedWeight:
        return PackedWeight(self.kind, self.data, self.aux, self.out_features, self.in_features)


class PackedLinear(_Packed):
    """y = x @ W^T (+ bias) with W packed; x (..., K) -> (..., N)."""

    def __init__(self, weight: PackedWeight, bias: torch.Tensor | None = None) -> None:
        super().__init__(weight)
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul_2d(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)

    def matmul_2d(self, x: torch.Tensor) -> torch.Tensor:
        """x (M, K) -> (M, N): `packed_matmul`'s ops on the buffers directly (the decode step's path)."""
        xb = x.to(torch.bfloat16)
        if self.kind == "int4":
            y = torch._weight_int4pack_mm_for_cpu(xb, self.data, PACK_GROUP, self.aux).to(x.dtype)
        else:
            y = torch._weight_int8pack_mm(xb, self.data, self.aux).to(x.dtype)
        return y + self.bias if self.bias is not None else y


class PackedEmbedding(_Packed):
    """Rows of an int8-packed table, dequantized only for the ids looked up (the table may be the
    tied output layer's weight: one tensor, two uses)."""

    def __init__(self, weight: PackedWeight) -> None:
        assert weight.kind == "int8", "an embedding table is packed as int8 rows"
        super().__init__(weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.data[ids].float()  # (..., K)
        return rows * self.aux[ids].float().unsqueeze(-1)


def packed_kernels_work(size: int = 2048, repeats: int = 5) -> tuple[bool, float, float]:
    """Measure on this machine: is an int4-packed matmul faster than a float32 one at batch 1?

    Uses a (4*size, size) weight, large enough (32 MiB in float32 for size 2048... 64 MiB at 4x) that neither
    fits a CPU cache, as in a real model. Returns (packed faster, packed seconds, float32 seconds)."""
    n, k = 4 * size, size
    x = torch.randn(1, k)
    w = torch.randn(n, k)
    codes = torch.randint(0, 16, (n, k), dtype=torch.int32)
    packed = PackedWeight(
        "int4",
        torch._convert_weight_to_int4pack_for_cpu(codes, 1),
        torch.ones(k // PACK_GROUP, n, 2, dtype=torch.bfloat16),
        n,
        k,
    )

    def best(fn) -> float:  # noqa: ANN001 -- a nullary callable
        fn()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return min(times)

    packed_s = best(lambda: packed_matmul(x, packed))
    float_s = best(lambda: torch.nn.functional.linear(x, w))
    return packed_s < float_s, packed_s, float_s
