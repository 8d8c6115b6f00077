"""The tiny LLM family models (tests/llm_families.py) written as GGUF files the way llama.cpp's converter writes
them (no tests here).

Lives here: `GGUF_ARCH`, `write_family_gguf`, `dequantized_model`. Imports gguf-py, numpy, torch and
`tests.llm_families` / `tests.llm_fixtures`.

What the converter does per family (convert_hf_to_gguf.py): Llama 3 and Mistral are written as architecture
"llama" with their Q/K rows permuted for ggml's rotary layout; Qwen2.5, Qwen3 and Gemma 3 keep their own
architecture names and row order; Gemma 3's norms are stored as 1 + w (ggml's RMSNorm multiplies by the weight
as stored), and its layer pattern and local rotary base are written under the keys llama.cpp reads. 2-D
weights are written in the asked quantization, 1-D tensors (norms, biases) in F32, as llama.cpp does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize
from transformers import PreTrainedModel

from tests.llm_families import FAMILIES, family_tokens
from tests.llm_fixtures import MERGES, _permute

# family -> the architecture name llama.cpp writes
GGUF_ARCH = {"llama3": "llama", "mistral": "llama", "qwen2.5": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3"}

_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GEMMA_BLOCK = {
    **_BLOCK,
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
_TOP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def _gguf_name(hf_name: str, arch: str) -> str:
    if hf_name in _TOP:
        return _TOP[hf_name]
    _, _, index, rest = hf_name.split(".", 3)
    return f"blk.{index}.{(_GEMMA_BLOCK if arch == 'gemma3' else _BLOCK)[rest]}"


def _header(w: GGUFWriter, family: str, model: PreTrainedModel, qtype: GGMLQuantizationType) -> None:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_name(f"tiny-{family}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(int(qtype))
    rope = cfg.rope_parameters
    if family == "gemma3":
        w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
        w.add_sliding_window(cfg.sliding_window)
        w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
    else:
        w.add_rope_dimension_count(head_dim)
        w.add_rope_freq_base(rope["rope_theta"])
    tokens = family_tokens(family)
    specials = FAMILIES[family][2]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])  # 3: control
    w.add_token_merges(MERGES)
    w.add_bos_token_id(tokens.index(specials[0]))
    w.add_eos_token_id(tokens.index(specials[1]))
    w.add_pad_token_id(tokens.index(specials[2]))
    w.add_add_bos_token(False)  # the chat templates write the bos themselves
    w.add_chat_template(FAMILIES[family][3])


def write_family_gguf(
    family: str, model: PreTrainedModel, path: Path, qtype: GGMLQuantizationType
) -> dict[str, torch.Tensor]:
    """Write `model` (a `tiny_family_model(family)`) as llama.cpp would; returns the transformers state dict a
    correct loader reads back (the stored weights dequantized, unpermuted, Gemma's norms minus one)."""
    arch = GGUF_ARCH[family]
    cfg = model.config
    w = GGUFWriter(str(path), arch)
    _header(w, family, model, qtype)
    expected: dict[str, torch.Tensor] = {}
    tied = bool(cfg.tie_word_embeddings)
    for name, tensor in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue  # a tied model has no output.weight: the loader ties it again
        data = tensor.numpy().astype(np.float32)
        heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}
        permuted = next((h for key, h in heads.items() if arch == "llama" and f".{key}.weight" in name), 0)
        shift = np.float32(1.0) if arch == "gemma3" and name.endswith("norm.weight") else np.float32(0.0)
        data = _permute(data, permuted) if permuted else data + shift
        if data.ndim == 2 and qtype != GGMLQuantizationType.F32:
            stored = data.astype(np.float16) if qtype == GGMLQuantizationType.F16 else quantize(data, qtype)
            w.add_tensor(_gguf_name(name, arch), stored, raw_dtype=qtype)
            back = dequantize(stored, qtype).reshape(data.shape)
        else:
            w.add_tensor(_gguf_name(name, arch), data)
            back = data
        if permuted:  # the loader's un-permutation
            back = back.reshape(permuted, -1, 2, back.shape[1]).swapaxes(1, 2).reshape(back.shape)
        expected[name] = torch.from_numpy(np.ascontiguousarray(back - shift))
    if tied:
        expected["lm_head.weight"] = expected["model.embed_tokens.weight"]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def dequantized_model(model: PreTrainedModel, expected: dict[str, torch.Tensor]) -> PreTrainedModel:
    """`model` with the weights the GGUF holds (what transformers runs "on the dequantized weights")."""
    model.load_state_dict(expected)
    return model.eval()
