"""A GGUF LLM kept in its own quantization: built from the file's blocks, dequantized one layer at a time.

Lives here: `register_quantized_llm`, `build_quantized_llm`, `quantized_weight_bytes`, `gguf_llm_state`.
Imports gguf-py, numpy, torch, transformers, memory, diffusers' GGUF kernels (through pipelines.quant) and
`pipelines.llm.gguf_loader`.

The float32 cache (gguf_cache) holds ~4x the file's bytes in RAM once loaded; here every quantized tensor
stays as the file's uint8 blocks (`GGUFParameter`) in a diffusers `GGUFLinear` (dequantized right before its
matmul) or a `GGUFEmbedding` (only the looked-up rows are dequantized). llama.cpp's Q/K row permutation is
undone on the blocks themselves: it permutes whole rows, and a row is whole blocks. Norms and other F32/F16
tensors are float32, as in the cache. The tokenizer and config still come from the cached conversion.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from transformers import AutoModelForCausalLM, PretrainedConfig

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.llm.gguf_loader import (
    _ARCHITECTURES,
    _IGNORED_TENSORS,
    UnsupportedGGUFError,
    _hf_name,
    norm_shift,
    read_gguf,
    unpermute_qk,
)
from pipelines.model_keys import component_keys

_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16)


def _float_embedding(architecture: str, name: str) -> bool:
    """Gemma 3's scaled embedding is an `nn.Embedding` subclass that diffusers' GGUF layers do not replace: it
    would look up raw block bytes, so its table is kept in float32."""
    return architecture == "gemma3" and name == "model.embed_tokens.weight"


def gguf_llm_state(path: Path, config: PretrainedConfig) -> dict[str, torch.Tensor]:
    """Transformers names -> quantized `GGUFParameter` (blocks as stored) or float32 tensors."""
    from diffusers.quantizers.gguf.utils import GGUFParameter

    contents = read_gguf(path)
    _, permuted = _ARCHITECTURES[contents.architecture]
    state: dict[str, torch.Tensor] = {}
    for tensor in contents.reader.tensors:
        name = _hf_name(tensor.name, contents.architecture)
        if name is None:
            if tensor.name in _IGNORED_TENSORS:
                continue
            raise UnsupportedGGUFError(f"{contents.path.name}: unexpected tensor {tensor.name!r}")
        quantized = tensor.tensor_type not in _FLOAT_TYPES and not _float_embedding(
            contents.architecture, name
        )
        if quantized:
            data = np.array(tensor.data)  # (rows, bytes per row): a copy out of the file mapping
        else:
            shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
            data = dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(shape)
            data = data - np.float32(norm_shift(contents.architecture, name))  # Gemma: 1 + w stored
        if permuted and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config.num_attention_heads if "q_proj" in name else config.num_key_value_heads
            data = unpermute_qk(data, heads)  # whole rows move: valid on blocks as on floats
        t = torch.from_numpy(np.ascontiguousarray(data))
        state[name] = GGUFParameter(t, quant_type=tensor.tensor_type) if quantized else t
    if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # one tensor, two modules
    return state


def quantized_weight_bytes(path: Path) -> int:
    """What `build_quantized_llm` holds: quantized tensors at their block bytes, the rest as float32."""
    contents = read_gguf(path)
    return sum(
        int(np.prod(t.shape)) * 4
        if t.tensor_type in _FLOAT_TYPES or _float_embedding(contents.architecture, _hf_name(t.name) or "")
        else int(t.n_bytes)
        for t in contents.reader.tensors
        if t.name not in _IGNORED_TENSORS
    )


def build_quantized_llm(
    path: Path, config: PretrainedConfig, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    from pipelines.quant.meta_load import build_from_tensors

    return build_from_tensors(
        lambda: AutoModelForCausalLM.from_config(config, dtype=dtype),
        gguf_llm_state(path, config),
        compute_dtype=dtype,
        storage="gguf",
        source=str(path),
    )


def register_quantized_llm(
    memory: MemoryManager,
    path: Path,
    config: PretrainedConfig,
    dtype: torch.dtype = torch.float32,
) -> ModelHandle:
    """Register the kept-quantized model; its weight bytes (the file's blocks) are known before loading, so
    the KV-cache budget check counts them, not the float32 size (the manager reports them before and after
    the build: the file's blocks are read in one pass)."""
    handle = memory.register(
        ComponentSpec(
            **component_keys(Path(path).resolve(), "llm-gguf").spec_fields(),
            name="llm",
            kind="llm",
            build=lambda: build_quantized_llm(path, config, dtype),
            dtype=dtype,
            blocks=("model.layers",),
            storage="gguf",
        )
    )
    if handle.weight_bytes is None:
        handle.weight_bytes = quantized_weight_bytes(path)
    return handle
