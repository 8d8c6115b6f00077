"""GGUF diffusion models: read a transformer/UNet GGUF kept quantized, and write one (tests, the demo).

Lives here: `gguf_shapes`, `gguf_tensors`, `replace_gguf_linears`, `gguf_block_bytes`, `write_gguf_denoiser`,
`GGUF_WRITE_TYPES`. May import: stdlib, numpy, torch, gguf, diffusers.

Reading uses diffusers' GGUF support: `load_gguf_checkpoint` gives each quantized tensor as a
`GGUFParameter` (the file's blocks as uint8 rows, plus the quant type), `GGUFLinear` dequantizes its weight
with diffusers' torch kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4) right before each matmul. So
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

GGUF_WRITE_TYPES = ("Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K")


def gguf_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape in torch order (elements, not bytes), from the header."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    return {t.name: tuple(int(d) for d in reversed(t.shape.tolist())) for t in reader.tensors}


def gguf_block_bytes(path: Path) -> dict[str, int]:
    """Tensor name -> bytes it takes in the file (quantized blocks or plain floats)."""
    from gguf import GGUFReader

    return {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}


def gguf_tensors(path: Path, strip: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of the file: `GGUFParameter` for quantized ones, plain tensors for F32/F16."""
    from diffusers.models.model_loading_utils import load_gguf_checkpoint

    return {
        k.removeprefix(strip): v for k, v in load_gguf_checkpoint(str(path)).items() if k.startswith(strip)
    }


def replace_gguf_linears(
    model: torch.nn.Module, state: Mapping[str, torch.Tensor], dtype: torch.dtype
) -> None:
    """Swap each Linear whose weight is quantized in `state` for diffusers' `GGUFLinear` (meta model)."""
    from diffusers.quantizers.gguf.utils import _replace_with_gguf_linear

    _replace_with_gguf_linear(model, dtype, state)


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
    for name, t in state.items():
        data = t.detach().float().cpu().numpy()
        if t.ndim == 2 and t.shape[-1] % block == 0:
            writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
