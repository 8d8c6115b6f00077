"""GGUF diffusion models: read a transformer/UNet GGUF kept quantized, and write one (tests, the demo).

Lives here: `gguf_shapes`, `gguf_tensors`, `replace_gguf_linears`, `gguf_block_bytes`, `write_gguf_denoiser`,
`GGUF_WRITE_TYPES`. May import: stdlib, numpy, torch, gguf, diffusers, `pipelines.weight_format` (the one GGUF opener).

Reading uses diffusers' GGUF support: `load_gguf_checkpoint` gives each quantized tensor as a
`GGUFParameter` (the file's blocks as uint8 rows, plus the quant type), and `GGUFLinear` (diffusers' class,
with the kernels run at the compute dtype) dequantizes its weight with diffusers' torch kernels (Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4) right before each matmul. So
the model stays quantized in memory and only one layer is ever dequantized: the ledger's bytes are the
file's block bytes, and the largest layer's dequantized copy is its extra working memory. Writing uses the
`gguf` package (`GGUFWriter`, `gguf.quants.quantize`), with city96's convention: 2-D weights quantized, the
rest (norms, biases, anything whose rows don't split into whole blocks) kept as F32.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from pipelines.weight_format import DamagedWeightsError, open_gguf_reader

# What `write_gguf_denoiser` can write: the `gguf` package quantizes these (it only dequantizes K-quants),
# plus our Q4_K below. Reading takes every type diffusers dequantizes.
GGUF_WRITE_TYPES = ("Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q4_K")


def gguf_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape in torch order (elements, not bytes), from the header."""
    reader = open_gguf_reader(Path(path))
    return {t.name: tuple(int(d) for d in reversed(t.shape.tolist())) for t in reader.tensors}


def gguf_block_bytes(path: Path) -> dict[str, int]:
    """Tensor name -> bytes it takes in the file (quantized blocks or plain floats)."""
    return {t.name: int(t.n_bytes) for t in open_gguf_reader(Path(path)).tensors}


def gguf_tensors(path: Path, strip: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of the file: `GGUFParameter` for quantized ones, plain tensors for F32/F16."""
    from diffusers.models.model_loading_utils import load_gguf_checkpoint

    path = Path(path)
    # diffusers opens the file with a bare GGUFReader: check it through ours first (sizes, a cut file), so
    # a damaged file is a message naming it rather than a numpy reshape error.
    open_gguf_reader(path)
    try:
        state = load_gguf_checkpoint(str(path))
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as exc:
        raise DamagedWeightsError(f"{path.name}: not a readable GGUF model ({str(exc)[:200]})") from None
    return {k.removeprefix(strip): v for k, v in state.items() if k.startswith(strip)}


def replace_gguf_linears(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], dtype: torch.dtype
) -> None:
    """Swap each Linear (diffusers' `GGUFLinear`) and Embedding (`GGUFEmbedding`) whose weight is quantized in
    `state` (a meta model, before its tensors are assigned)."""
    for name, module in list(model.named_modules()):
        if type(module) not in (torch.nn.Linear, torch.nn.Embedding):
            continue
        if not hasattr(state.get(f"{name}.weight"), "quant_type"):
            continue
        if isinstance(module, torch.nn.Linear):
            new: torch.nn.Module = GGUFLinear(
                module.in_features, module.out_features, module.bias is not None, dtype
            )
        else:
            new = GGUFEmbedding(module.num_embeddings, module.embedding_dim, device="meta")
            new.compute_dtype = dtype
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)


def dequantize(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A `GGUFParameter`'s values at `dtype`, with diffusers' kernels computing in `dtype`.

    diffusers' `dequantize_gguf_tensor` leaves the kernels at their default, float16 arithmetic, which is
    ~50x slower than float32 on CPUs without native half support (FINDINGS): same kernels, dtype passed.
    """
    from diffusers.quantizers.gguf.utils import GGML_QUANT_SIZES, dequantize_functions

    block, type_size = GGML_QUANT_SIZES[w.quant_type]
    data = w.as_tensor().view(torch.uint8)
    shape = (*data.shape[:-1], data.shape[-1] // type_size * block)
    values = dequantize_functions[w.quant_type](data.reshape(-1, type_size), block, type_size, dtype=dtype)
    return values.reshape(shape).to(dtype)


def _diffusers_gguf_linear() -> type:
    from diffusers.quantizers.gguf.utils import GGUFLinear as DiffusersGGUFLinear

    return DiffusersGGUFLinear


class GGUFLinear(_diffusers_gguf_linear()):
    """diffusers' `GGUFLinear` (weight kept as GGUF blocks, dequantized right before the matmul; fused kernels
    on CUDA when diffusers has them), with the CPU kernels run at the compute dtype (see `dequantize`)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, compute_dtype: torch.dtype) -> None:
        super().__init__(in_features, out_features, bias, compute_dtype=compute_dtype, device="meta")

    def forward_native(self, inputs: torch.Tensor) -> torch.Tensor:
        w = self.weight
        weight = dequantize(w, self.compute_dtype) if hasattr(w, "quant_type") else w.to(self.compute_dtype)
        bias = self.bias.to(self.compute_dtype) if self.bias is not None else None
        return torch.nn.functional.linear(inputs, weight, bias)


class GGUFEmbedding(torch.nn.Embedding):
    """An embedding table kept quantized: a lookup dequantizes only the rows asked for (each row is whole
    blocks, so a row of the uint8 data is a row of the table)."""

    compute_dtype: torch.dtype = torch.float32

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from diffusers.quantizers.gguf.utils import GGUFParameter

        w = self.weight
        rows = w.as_tensor()[ids.reshape(-1)]  # (n, bytes per row)
        values = dequantize(GGUFParameter(rows, quant_type=w.quant_type), self.compute_dtype)
        return values.reshape(*ids.shape, -1)


def largest_dequantized_bytes(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> int:
    """The upcast buffer: the largest quantized tensor once dequantized to `dtype`."""
    esize = torch.empty((), dtype=dtype).element_size()
    sizes = [int(np.prod(t.quant_shape)) for t in state.values() if hasattr(t, "quant_shape")]
    return max(sizes, default=0) * esize


def write_gguf_denoiser(state: Mapping[str, torch.Tensor], path: Path, qtype: str, *, arch: str) -> Path:
    """Write `state` as a GGUF file: 2-D weights in `qtype` where rows split into whole blocks, else F32."""
    import gguf

    kind = gguf.GGMLQuantizationType[qtype]
    block, _ = gguf.GGML_QUANT_SIZES[kind]
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    quantize = quantize_q4_k if qtype == "Q4_K" else (lambda a: gguf.quants.quantize(a, kind))
    for name, t in state.items():
        data = t.detach().float().cpu().numpy()
        if t.ndim == 2 and t.shape[-1] % block == 0:
            writer.add_tensor(name, quantize(data), raw_dtype=kind)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize_q4_k(data: np.ndarray) -> np.ndarray:
    """Q4_K blocks (ggml's layout) for a float32 (rows, cols) array, cols a multiple of 256.

    A block holds 256 values as 8 sub-blocks of 32: value = d * sc_j * q - dmin * m_j with 4-bit q and 6-bit
    sc_j, m_j packed into 12 bytes, d and dmin in float16 (the layout `gguf.quants.Q4_K` dequantizes). A
    plain min/max fit per sub-block; llama.cpp searches scales further, so its files are a little closer.
    """
    rows = data.shape[0]
    x = data.reshape(-1, 8, 32).astype(np.float32)  # (blocks, sub-block, value)
    lo = np.minimum(x.min(axis=-1), 0.0)
    scale = (x.max(axis=-1) - lo) / 15.0
    d = (scale.max(axis=-1) / 63.0).astype(np.float16)
    dmin = (np.maximum(-lo, 0).max(axis=-1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63).astype(
        np.uint8
    )
    mn = np.clip(np.round(np.divide(-lo, dminf, out=np.zeros_like(lo), where=dminf > 0)), 0, 63).astype(
        np.uint8
    )
    step = (df * sc)[..., None]
    q = np.divide(x + (dminf * mn)[..., None], step, out=np.zeros_like(x), where=step > 0)
    q = np.clip(np.round(q), 0, 15).astype(np.uint8)  # (blocks, 8, 32)
    packed = np.empty((x.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(x.shape[0], 128)  # sub-blocks 2g (low) and 2g+1 (high)
    blocks = np.concatenate(
        [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), packed, qs], axis=1
    )
    return blocks.reshape(rows, -1)
