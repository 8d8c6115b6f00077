"""GGUF loading: Q/K un-permutation, every quant type, the config, the tokenizer, the on-disk cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import AutoTokenizer

from pipelines.llm.gguf_cache import ensure_gguf_converted, gguf_cache_key
from pipelines.llm.gguf_loader import gguf_config, gguf_state_dict, gguf_tokens, read_gguf, unpermute_qk
from pipelines.llm.hf_loader import build_causal_lm, load_tokenizer, prepare_llm_files
from pipelines.paths import UnsafeFormatError
from tests.llm_fixtures import (  # noqa: F401
    _permute,
    smollm,
    smollm_files,
    tiny_llama,
    tiny_qwen2,
    write_tiny_gguf,
)

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

TEXTS = [
    "Hello world",
    "What is the capital of France? Answer in one sentence.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "numbers 1234567890 3.14159 -42 1e-5",
    "ünïcödé café naïve Straße",
    "日本語のテキスト 中文 한국어",
    "emoji 🎉🚀👍🏽 and flags 🇫🇷",
    "code: def f(x):\n    return x**2  # comment",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "mixed <|endoftext|> specials <|im_end|>",
    "",
]


def test_unpermute_undoes_llama_cpp_permutation() -> None:
    rng = np.random.default_rng(0)
    for n_head, head_dim in ((4, 16), (9, 64), (3, 64)):
        w = rng.standard_normal((n_head * head_dim, 32)).astype(np.float32)
        assert np.array_equal(unpermute_qk(_permute(w, n_head), n_head), w)


@pytest.mark.parametrize(
    "qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1], ids=lambda q: q.name
)
def test_every_tensor_reads_back_dequantized_and_unpermuted(tmp_path: Path, qtype: Q) -> None:
    model = tiny_llama()
    path = tmp_path / f"tiny-{qtype.name}.gguf"
    expected = write_tiny_gguf(model, path, qtype)
    contents = read_gguf(path)
    config = gguf_config(contents, gguf_tokens(contents))
    state = gguf_state_dict(contents, config)
    assert set(state) == set(expected)
    for name, want in expected.items():
        assert np.array_equal(state[name].numpy(), want), name
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "max_position_embeddings",
    ):
        assert getattr(config, key) == getattr(model.config, key), key
    assert config.rope_parameters["rope_theta"] == model.config.rope_parameters["rope_theta"]
    assert config.tie_word_embeddings is False


def test_f32_gguf_roundtrip_gives_the_same_model(tmp_path: Path) -> None:
    model = tiny_llama()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, path, Q.F32)
    loaded = build_causal_lm(prepare_llm_files(path))
    ids = torch.tensor([[5, 70, 80, 90, 100, 3, 4]])
    with torch.no_grad():
        # The F32 file holds the same float32 weights; read from a mapped file they sit elsewhere in memory,
        # which some CPUs' GEMM kernels round differently. Logits reach ~9 (ulp 9.5e-7): 1e-5 is ~10 ulps
        # (seen: 0); a wrong q/k permutation moves logits by whole units.
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)


def test_qwen2_gguf_roundtrip_with_biases_and_no_permutation(tmp_path: Path) -> None:
    model = tiny_qwen2()
    path = tmp_path / "tiny-qwen2.gguf"
    write_tiny_gguf(model, path, Q.F32)
    loaded = build_causal_lm(prepare_llm_files(path))
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    ids = torch.tensor([[5, 70, 80, 90, 100, 3, 4]])
    with torch.no_grad():  # tolerance: as for the Llama round trip above (logits ~8 here)
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)


def test_tiny_gguf_tokenizer_matches_transformers_gguf_tokenizer(tmp_path: Path) -> None:
    model = tiny_llama()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, path, Q.Q8_0)
    ours = load_tokenizer(prepare_llm_files(path))
    ref = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in TEXTS:
        assert ours(text)["input_ids"] == ref(text)["input_ids"], text


def test_cache_layout_and_reuse(tmp_path: Path) -> None:
    model = tiny_llama()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, path, Q.Q4_1)
    root = tmp_path / "cache"
    folder = ensure_gguf_converted(path, cache_root=root)
    assert folder.parent == root and folder.name == gguf_cache_key(path) and folder.name.startswith("v1-")
    names = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "nodeloom-gguf.json",
    } <= names
    meta = json.loads((folder / "nodeloom-gguf.json").read_text())
    assert meta["architecture"] == "llama" and meta["size"] == path.stat().st_size
    assert meta["tensor_types"]["Q4_1"] == 16  # 7 per layer x 2, the embedding and the output head
    assert [p.name for p in root.iterdir()] == [folder.name]  # no temporary folder left behind
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_gguf_converted(path, cache_root=root) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rewritten
    # A replaced file gets a new key and a new conversion.
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert ensure_gguf_converted(path, cache_root=root) != folder


def test_pickle_weights_are_refused_unless_opted_in(tmp_path: Path) -> None:
    model = tiny_llama()
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(UnsafeFormatError, match="pickle"):
        prepare_llm_files(tmp_path)
    files = prepare_llm_files(tmp_path, allow_pickle=True)
    assert files.uses_pickle


def test_transformers_folder_loads(tmp_path: Path) -> None:
    model = tiny_llama()
    model.save_pretrained(tmp_path)
    files = prepare_llm_files(tmp_path)
    assert not files.from_gguf and files.weight_files == (tmp_path / "model.safetensors",)
    loaded = build_causal_lm(files)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_smollm2_cached_tokenizer_encodes_like_the_gguf(smollm_files, smollm) -> None:  # noqa: F811
    _, ours = smollm
    gguf_path = smollm_files.source
    ref = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    for text in TEXTS:
        assert ours(text)["input_ids"] == ref(text)["input_ids"], text
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ça va? 🎉 2+2=?"}]
    assert ours.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    ) == ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ours.convert_tokens_to_ids("<|im_end|>") == 2


def test_smollm2_cache_folder(smollm_files, monkeypatch) -> None:  # noqa: F811
    folder = smollm_files.folder
    assert folder.parent.name == "gguf-cache" and smollm_files.from_gguf
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["num_key_value_heads"] == 3
    assert config["tie_word_embeddings"] is True
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2]  # <|im_end|>, the end of an assistant turn
    meta = json.loads((folder / "nodeloom-gguf.json").read_text())
    assert meta["tensor_types"] == {"Q8_0": 1, "F32": 61, "Q4_1": 210}
    # A second load finds the same folder without converting again: any conversion now would fail, and
    # the folder's marker file is the one the first conversion wrote.
    import pipelines.llm.gguf_cache as gguf_cache

    def no_conversion(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the cached conversion was not reused")

    monkeypatch.setattr(gguf_cache, "convert_gguf", no_conversion)
    marker = (folder / "nodeloom-gguf.json").stat().st_mtime_ns
    again = prepare_llm_files(smollm_files.source)
    assert again.folder == folder and again.from_gguf
    assert (folder / "nodeloom-gguf.json").stat().st_mtime_ns == marker


def test_conversion_is_budgeted_as_working_memory(tmp_path: Path) -> None:
    from memory import BudgetExceeded, MemoryConfig, MemoryManager
    from pipelines.llm.runtime import open_llm

    model = tiny_llama(seed=4)
    path = tmp_path / "budgeted.gguf"
    write_tiny_gguf(model, path, Q.Q8_0)
    fp32 = sum(p.numel() for p in model.state_dict().values()) * 4
    small = MemoryManager(MemoryConfig(device="cpu", policy="sequential", ram_budget=str(fp32 // 2)))
    with pytest.raises(BudgetExceeded, match=r"converting budgeted.gguf to float32 needs"):
        open_llm(small, path)
    assert not small.ledger.working
    roomy = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    llm = open_llm(roomy, path)
    assert not roomy.ledger.working and llm.files.from_gguf
    assert llm.handle.weight_bytes == fp32  # counted from the cached safetensors header
