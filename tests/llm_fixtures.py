"""Shared helpers for the LLM tests (no tests here): a tiny random Llama, its GGUF export, SmolLM2.

Lives here: `tiny_llama`, `byte_tokenizer_spec`, `write_tiny_gguf`, the session fixtures `smollm_files`,
`smollm` (one converted + loaded SmolLM2 for the whole session). Imports pipelines.llm, gguf-py, transformers.
Test modules import the fixtures by name from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "Ġ t", "Ġt h", "o r", "Ġ a"]


def _byte_chars() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values())


def byte_tokenizer_spec() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a tiny byte-level BPE: 3 specials, 256 bytes, a few merges."""
    merged = ["".join(m.split(" ")) for m in MERGES]
    tokens = SPECIALS + _byte_chars() + merged
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, MERGES


def tiny_llama(seed: int = 0, vocab_size: int | None = None) -> LlamaForCausalLM:
    """A random 2-layer Llama with GQA (4 heads, 2 kv heads); dims are multiples of 32 for GGUF blocks."""
    torch.manual_seed(seed)
    vocab = vocab_size or len(byte_tokenizer_spec()[0])
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger weights than the init so the logits are not all near-ties
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return model


def tiny_qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    """A random 2-layer Qwen2 (biases on q/k/v, no Q/K permutation in GGUF)."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(byte_tokenizer_spec()[0]),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3) if p.dim() == 2 else p.add_(torch.randn_like(p) * 0.1)
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (the inverse of what the loader undoes)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in top:
        return top[hf_name]
    _, _, index, rest = hf_name.split(".", 3)
    return f"blk.{index}.{_NAMES[rest]}"


def write_tiny_gguf(
    model: LlamaForCausalLM | Qwen2ForCausalLM, path: Path, qtype: GGMLQuantizationType, eos_id: int = 2
) -> dict[str, np.ndarray]:
    """Export `model` as llama.cpp would (llama: permuted Q/K; 2-D weights in `qtype`, the rest F32).

    Returns what a correct loader must read back for each transformers name (dequantized, unpermuted).
    """
    cfg = model.config
    tokens, types, merges = byte_tokenizer_spec()
    arch = cfg.model_type
    permute = arch == "llama"
    w = GGUFWriter(str(path), arch)
    w.add_name("tiny-llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(int(qtype))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(eos_id)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    expected: dict[str, np.ndarray] = {}
    from gguf.quants import dequantize

    for name, tensor in model.state_dict().items():
        data = tensor.numpy().astype(np.float32)
        if permute and name.endswith("q_proj.weight"):
            data = _permute(data, cfg.num_attention_heads)
        elif permute and name.endswith("k_proj.weight"):
            data = _permute(data, cfg.num_key_value_heads)
        if data.ndim == 2 and qtype != GGMLQuantizationType.F32:
            stored = data.astype(np.float16) if qtype == GGMLQuantizationType.F16 else quantize(data, qtype)
            w.add_tensor(gguf_name(name), stored, raw_dtype=qtype)
            back = dequantize(stored, qtype).reshape(data.shape)
        else:
            w.add_tensor(gguf_name(name), data)
            back = data
        if permute and name.endswith("q_proj.weight"):
            back = (
                back.reshape(cfg.num_attention_heads, -1, 2, back.shape[1]).swapaxes(1, 2).reshape(back.shape)
            )
        elif permute and name.endswith("k_proj.weight"):
            back = (
                back.reshape(cfg.num_key_value_heads, -1, 2, back.shape[1]).swapaxes(1, 2).reshape(back.shape)
            )
        expected[name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.fixture
def one_thread() -> Any:
    """Run a test on one torch thread, then restore. On 2 shared cores a busy neighbour makes 2-thread
    OpenMP barriers 10x slower; one thread keeps SmolLM2 tests quick and their kernels deterministic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm_files() -> Any:
    """SmolLM2's GGUF converted once for the session (into the session's NODELOOM_DATA_DIR)."""
    from pipelines.llm.hf_loader import prepare_llm_files
    from pipelines.paths import resolve_model_path

    try:
        path = resolve_model_path("builtin:smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return prepare_llm_files(path)


@pytest.fixture(scope="session")
def smollm_packed() -> Any:
    """SmolLM2's GGUF repacked for the CPU kernels once for the session (what `keep_quantized: auto` loads
    on a CPU); the folder of the packed cache."""
    from pipelines.llm.packed_cache import ensure_packed
    from pipelines.paths import resolve_model_path

    try:
        path = resolve_model_path("builtin:smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return ensure_packed(path)


@pytest.fixture(scope="session")
def smollm(smollm_files: Any) -> tuple[Any, Any]:
    """(model, tokenizer) of SmolLM2 from the converted cache, loaded once for the session."""
    from pipelines.llm.hf_loader import build_causal_lm, load_tokenizer

    return build_causal_lm(smollm_files), load_tokenizer(smollm_files)
