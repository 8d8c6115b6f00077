"""Read a GGUF file into what transformers needs: a config, a float state dict and a tokenizer.

Lives here: `GGUFContents`, `read_gguf`, `gguf_config`, `gguf_state_dict`, `gguf_tokenizer`,
`unpermute_qk`. Imports gguf-py, numpy, torch and transformers; nothing from Nodeloom.

Why not `from_pretrained(gguf_file=...)`: on 2 CPU cores it takes ~28 s, most of it re-parsing the
49k-token metadata in Python. `gguf.GGUFReader` memory-maps the file and `gguf.quants.dequantize`
turns each block-quantized tensor (Q4_0, Q4_1, Q8_0, K-quants, F16...) into float32 in numpy, so a
whole conversion is a few seconds; `gguf_cache` then stores the result as safetensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize
from transformers import (
    Gemma3TextConfig,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

from pipelines.weight_format import open_gguf_reader

# GGUF architectures we turn into a transformers model, and whether llama.cpp's converter permuted
# the Q/K rows for its rotary layout (it does for llama/mistral, whose rope is GPT-J style in ggml; not for
# qwen2/qwen3/gemma3, NeoX style like transformers'). Mistral files usually say "llama" (llama.cpp's converter).
_ARCHITECTURES: dict[str, tuple[type[PretrainedConfig], bool]] = {
    "llama": (LlamaConfig, True),
    "mistral": (LlamaConfig, True),
    "qwen2": (Qwen2Config, False),
    "qwen3": (Qwen3Config, False),
    "gemma3": (Gemma3TextConfig, False),
}
_CAUSAL_LM = {
    "llama": "LlamaForCausalLM",
    "mistral": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}
# llama.cpp's Gemma 3: every 6th layer global, the others local with a rotary base of 10000 (hard-coded there
# for files that do not say; `attention.sliding_window_pattern` and `rope.freq_base_swa` when they do).
_GEMMA3_PATTERN, _GEMMA3_LOCAL_THETA = 6, 10000.0

# GGUF tensor name (after "blk.N.") -> transformers name (after "model.layers.N.").
_BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",  # Qwen3, Gemma 3
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
# Gemma 3's four norms a block: its `ffn_norm` is the pre-feed-forward one (Llama's post-attention norm).
_GEMMA3_BLOCK_TENSORS = {
    **_BLOCK_TENSORS,
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Tensors a file may carry that the transformers model computes itself.
_IGNORED_TENSORS = ("rope_freqs.weight",)


class UnsupportedGGUFError(ValueError):
    """The file is a GGUF we cannot turn into a transformers model (architecture, tokenizer)."""


@dataclass
class GGUFContents:
    """A parsed file: the reader (memory-mapped tensors) and its scalar metadata."""

    path: Path
    reader: GGUFReader
    metadata: dict[str, Any]  # every key except the big tokenizer arrays

    @property
    def architecture(self) -> str:
        return str(self.metadata["general.architecture"])

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}", default)

    def field(self, key: str) -> Any:
        """A metadata value read in full (for the token arrays left out of `metadata`)."""
        found = self.reader.fields.get(key)
        return None if found is None else found.contents()


_BIG_ARRAYS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores",
)


def read_gguf(path: Path, on_array: Callable[[str, int, int], None] | None = None) -> GGUFContents:
    """Parse the file's metadata and tensor table; `on_array(key, items, total)` follows the big arrays."""
    # GGUFReader that says "damaged, N bytes missing" for a cut file
    reader = open_gguf_reader(path, on_array)
    metadata = {}
    for key, field in reader.fields.items():
        if key in _BIG_ARRAYS or key.startswith("GGUF."):
            continue
        if field.types and field.types[0] == GGUFValueType.ARRAY and len(field.data) > 64:
            continue
        metadata[key] = field.contents()
    contents = GGUFContents(Path(path), reader, metadata)
    if contents.architecture not in _ARCHITECTURES:
        raise UnsupportedGGUFError(
            f"{Path(path).name}: GGUF architecture {contents.architecture!r} is not supported "
            f"(supported: {', '.join(sorted(_ARCHITECTURES))})"
        )
    return contents


def _token_id(contents: GGUFContents, name: str) -> int | None:
    value = contents.metadata.get(f"tokenizer.ggml.{name}_token_id")
    return None if value is None else int(value)


def end_of_turn_ids(contents: GGUFContents, tokens: list[str]) -> list[int]:
    """Ids that end a reply: the file's eos plus the chat template's end-of-turn token.

    A chat model must stop on its end-of-turn token (`<|im_end|>`, id 2 in SmolLM2), which is not
    always the id a file calls eos; an eos equal to bos (seen in some conversions) is ignored.
    """
    ids: list[int] = []
    template = str(contents.metadata.get("tokenizer.chat_template") or "")
    for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if marker in template and marker in tokens:
            ids.append(tokens.index(marker))
    eos = _token_id(contents, "eos")
    bos = _token_id(contents, "bos")
    # An eos equal to bos is a mislabel: stopping there would stop on the turn opener.
    if eos is not None and eos != bos and eos not in ids:
        ids.append(eos)
    return ids


def gguf_config(contents: GGUFContents, tokens: list[str]) -> PretrainedConfig:
    """The transformers config the file's metadata describes."""
    config_class, _ = _ARCHITECTURES[contents.architecture]
    hidden = int(contents.arch_value("embedding_length"))
    heads = int(contents.arch_value("attention.head_count"))
    head_dim = int(
        contents.arch_value("rope.dimension_count")
        or contents.arch_value("attention.key_length")
        or hidden // heads
    )
    has_output = any(t.name == "output.weight" for t in contents.reader.tensors)
    eos_ids = end_of_turn_ids(contents, tokens)
    kwargs: dict[str, Any] = dict(
        vocab_size=int(contents.arch_value("vocab_size") or len(tokens)),
        hidden_size=hidden,
        intermediate_size=int(contents.arch_value("feed_forward_length")),
        num_hidden_layers=int(contents.arch_value("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(contents.arch_value("attention.head_count_kv") or heads),
        max_position_embeddings=int(contents.arch_value("context_length") or 2048),
        rms_norm_eps=float(contents.arch_value("attention.layer_norm_rms_epsilon") or 1e-6),
        rope_theta=float(contents.arch_value("rope.freq_base") or 10000.0),
        tie_word_embeddings=not has_output,
        bos_token_id=_token_id(contents, "bos"),
        eos_token_id=eos_ids[0] if len(eos_ids) == 1 else eos_ids,
        pad_token_id=_token_id(contents, "padding"),
    )
    if contents.architecture != "qwen2":  # Qwen2's head_dim is always hidden / heads
        kwargs["head_dim"] = head_dim
    if contents.architecture == "gemma3":
        kwargs.update(_gemma3_kwargs(contents, kwargs, head_dim))
    config = config_class(**kwargs)
    config.architectures = [_CAUSAL_LM[contents.architecture]]
    return config


def _gemma3_kwargs(contents: GGUFContents, kwargs: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """Gemma 3's extras: local/global layers, two rotary bases, the score scale, soft-caps."""
    layers = int(kwargs["num_hidden_layers"])
    pattern = contents.arch_value("attention.sliding_window_pattern")
    if pattern is None or isinstance(pattern, int | float):
        every = int(pattern or _GEMMA3_PATTERN)
        local = [bool((i + 1) % every) for i in range(layers)]
    else:  # one flag per layer, True = sliding window
        local = [bool(v) for v in pattern]
    theta = kwargs.pop("rope_theta")
    return {
        "layer_types": ["sliding_attention" if x else "full_attention" for x in local],
        "sliding_window": int(contents.arch_value("attention.sliding_window") or 4096),
        # llama.cpp scores with 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim in Gemma 3 1B-12B)
        "query_pre_attn_scalar": head_dim,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": theta},
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": float(contents.arch_value("rope.freq_base_swa") or _GEMMA3_LOCAL_THETA),
            },
        },
        "final_logit_softcapping": contents.arch_value("final_logit_softcapping"),
        "attn_logit_softcapping": contents.arch_value("attn_logit_softcapping"),
    }


def norm_shift(architecture: str, hf_name: str) -> float:
    """What llama.cpp added to this tensor: Gemma's norms scale by (1 + w), and its converter stores 1 + w."""
    return 1.0 if architecture == "gemma3" and hf_name.endswith("norm.weight") else 0.0


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a Q or K projection (rows = n_head * head_dim)."""
    d = w.shape[0]
    # (n_head, head_dim/2, 2, in) -> swap the pair axis back in front of the half axis
    return w.reshape(n_head, d // n_head // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def _hf_name(gguf_name: str, architecture: str = "llama") -> str | None:
    if gguf_name in _TOP_TENSORS:
        return _TOP_TENSORS[gguf_name]
    block = _GEMMA3_BLOCK_TENSORS if architecture == "gemma3" else _BLOCK_TENSORS
    if gguf_name.startswith("blk."):
        _, index, rest = gguf_name.split(".", 2)
        if rest in block:
            return f"model.layers.{index}.{block[rest]}"
    return None


def gguf_state_dict(
    contents: GGUFContents, config: PretrainedConfig, on_bytes: Callable[[int, int], None] | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor dequantized to float32 under its transformers name; `on_bytes(done, total)` after each."""
    _, permuted = _ARCHITECTURES[contents.architecture]
    state: dict[str, torch.Tensor] = {}
    total, done = float32_bytes(contents), 0
    for tensor in contents.reader.tensors:
        name = _hf_name(tensor.name, contents.architecture)
        if name is None:
            if tensor.name in _IGNORED_TENSORS:
                continue
            raise UnsupportedGGUFError(f"{contents.path.name}: unexpected tensor {tensor.name!r}")
        # numpy shape is GGUF's ne reversed, i.e. transformers' (out_features, in_features)
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        weights = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False).reshape(shape)
        if permuted and name.endswith("q_proj.weight"):
            weights = unpermute_qk(weights, config.num_attention_heads)
        elif permuted and name.endswith("k_proj.weight"):
            weights = unpermute_qk(weights, config.num_key_value_heads)
        shift = norm_shift(contents.architecture, name)
        if shift:
            weights = weights - np.float32(shift)
        state[name] = torch.from_numpy(np.require(weights, requirements=["C", "W"]))
        done += weights.size * 4
        if on_bytes is not None:
            on_bytes(done, total)
    return state


def gguf_tokenizer(contents: GGUFContents, tokens: list[str]) -> PreTrainedTokenizerFast:
    """The file's tokenizer, built with transformers' own GGUF conversion (same encoding as
    `AutoTokenizer.from_pretrained(..., gguf_file=...)`) but from the metadata gguf-py already read."""
    from transformers.integrations.gguf import convert_gguf_tokenizer

    tokenizer_dict: dict[str, Any] = {
        "tokenizer_type": contents.metadata.get("tokenizer.ggml.model"),
        "pre_tokenizer_type": contents.metadata.get("tokenizer.ggml.pre"),
        "tokens": tokens,
    }
    for key, name in (
        ("tokenizer.ggml.merges", "merges"),
        ("tokenizer.ggml.token_type", "token_type"),
        ("tokenizer.ggml.scores", "scores"),
    ):
        value = contents.field(key)
        if value is not None:
            tokenizer_dict[name] = list(value)
    if contents.metadata.get("tokenizer.ggml.add_space_prefix") is not None:
        tokenizer_dict["add_prefix_space"] = bool(contents.metadata["tokenizer.ggml.add_space_prefix"])
    if tokenizer_dict["tokenizer_type"] not in ("gpt2", "llama"):
        raise UnsupportedGGUFError(
            f"{contents.path.name}: tokenizer {tokenizer_dict['tokenizer_type']!r} is not supported"
        )
    backend, _ = convert_gguf_tokenizer(contents.architecture, tokenizer_dict)

    special = {}
    for name, key in (("bos_token", "bos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        token_id = _token_id(contents, key)
        if token_id is not None:
            special[name] = tokens[token_id]
    eos_ids = end_of_turn_ids(contents, tokens)
    if eos_ids:
        special["eos_token"] = tokens[eos_ids[0]]
    add_bos = contents.metadata.get("tokenizer.ggml.add_bos_token")
    if add_bos is None:
        add_bos = tokenizer_dict["tokenizer_type"] == "llama"
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        chat_template=contents.metadata.get("tokenizer.chat_template"),
        add_bos_token=bool(add_bos),
        add_eos_token=bool(contents.metadata.get("tokenizer.ggml.add_eos_token") or False),
        **special,
    )
    return tokenizer


def gguf_tokens(contents: GGUFContents) -> list[str]:
    return [str(t) for t in contents.field("tokenizer.ggml.tokens")]


def float32_bytes(contents: GGUFContents) -> int:
    """Bytes of every tensor once dequantized to float32: the peak a conversion holds in RAM."""
    return sum(int(np.prod(t.shape)) * 4 for t in contents.reader.tensors)


def mapped_bytes(contents: GGUFContents) -> int:
    """Bytes of the file's tensor data: the reader maps the file, and dequantizing every tensor faults all of
    it in, so a conversion holds these pages beside the float32 copy until the reader goes."""
    return sum(int(t.n_bytes) for t in contents.reader.tensors)


def tensor_types(contents: GGUFContents) -> dict[str, int]:
    """How many tensors of each quantization type the file holds, e.g. {"Q4_1": 210, "F32": 61}."""
    counts: dict[str, int] = {}
    for tensor in contents.reader.tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return counts
