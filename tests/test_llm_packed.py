"""GGUF LLMs repacked for torch's int4/int8 CPU matmuls: the kernels, the compact decoder, the cache.

The packed matmul is checked against the file's own dequantized weights; the compact decoder with float32
weights against transformers token for token; the packed model against the float32 copy of the same file;
the repacked cache is reused and follows the file when it changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from memory import MemoryConfig, MemoryManager
from pipelines.llm import packed_cache
from pipelines.llm.compact_model import CompactConfig
from pipelines.llm.generate import generate
from pipelines.llm.kv_cache import KVCache
from pipelines.llm.packed_cache import ensure_packed, packed_cache_dir
from pipelines.llm.packed_linear import packed_matmul, repack_blocks
from pipelines.llm.packed_model import compact_from_float
from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
from pipelines.llm.sampling import SamplingParams
from tests.llm_fixtures import one_thread, tiny_llama, tiny_qwen2, write_tiny_gguf  # noqa: F401 -- a fixture

# bfloat16 keeps 8 significant bits: relative rounding <= 2^-9, doubled for a safety margin
BF16_EPS = 2.0**-8


@pytest.mark.parametrize(
    ("qtype", "kind"),
    [(Q.Q4_0, "int4"), (Q.Q4_1, "int4"), (Q.Q4_K, "int4"), (Q.Q8_0, "int8"), (Q.Q5_0, "int8")],
)
def test_packed_matmul_matches_the_dequantized_weights(qtype: Q, kind: str) -> None:
    from pipelines.quant.gguf_files import quantize_q4_k  # gguf-py cannot write K-quants

    rng = np.random.default_rng(0)
    n, k = 96, 256
    weights = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    rows = quantize_q4_k(weights) if qtype == Q.Q4_K else quantize(weights, qtype)  # (N, bytes) as in a file
    reference = torch.from_numpy(dequantize(rows, qtype).reshape(n, k)).double()
    packed = repack_blocks(rows, qtype, (n, k))
    assert packed.kind == kind
    x = torch.randn(5, k)
    got = packed_matmul(x, packed).double()
    want = x.double() @ reference.T
    # Error sources, each bounded per output by a share of sum_k |x_k w_k|: x and the scales rounded to
    # bfloat16 (2 x BF16_EPS), the bfloat16 output (BF16_EPS); Q8_0's per-block scales become one per row,
    # which moves each weight by at most half a row step (max |w| / 254), bounded with sum_k |x_k|.
    budget = 3 * BF16_EPS * (x.double().abs() @ reference.abs().T)
    if kind == "int8":
        budget += x.double().abs().sum(1, keepdim=True) * reference.abs().amax(1) / 254
    assert torch.all((got - want).abs() <= budget + 1e-6)
    # Held bytes: no float copy, about the file's own block size (Q4_0 gains a zero per block, Q4_K a
    # bfloat16 scale and zero per 32 values instead of 6-bit ones; Q5_0 goes to 8 bits).
    assert packed.nbytes <= rows.nbytes * (1.5 if qtype == Q.Q5_0 else 1.12)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_compact_decoder_gives_transformers_greedy_tokens(arch: str) -> None:
    model = (tiny_llama() if arch == "llama" else tiny_qwen2()).eval()
    compact = compact_from_float(model.state_dict(), CompactConfig.from_transformers(model.config))
    prompt = [5, 17, 42, 99, 3]
    runs = {}
    for name, m in (("transformers", model), ("compact", compact)):
        cache = KVCache(model.config, 40, model=m)
        runs[name] = generate(m, prompt, cache, max_new_tokens=32, params=SamplingParams()).tokens
    assert runs["compact"] == runs["transformers"]
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        want = model(ids).logits[0, -1]
        got = compact.step(ids, compact.new_kv(8))[0]
    # Same float32 math in another op order (fused q/k/v, SDPA's GQA): differences are float32 roundings.
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("arch", "qtype"), [("llama", Q.Q4_0), ("llama", Q.Q4_1), ("qwen2", Q.Q8_0)])
def test_packed_greedy_agrees_with_the_float32_copy(tmp_path: Path, arch: str, qtype: Q) -> None:
    from pipelines.llm.chat import build_prompt_ids

    path = tmp_path / f"tiny-{arch}-{qtype.name}.gguf"
    write_tiny_gguf(tiny_llama() if arch == "llama" else tiny_qwen2(), path, qtype)
    request = GenerationRequest(prompt="hello there", chat=False, max_new_tokens=32)
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        full, packed = open_llm(mm, path, keep_quantized="off"), open_llm(mm, path, keep_quantized="on")
        assert packed.handle.spec.storage == "packed"
        assert packed.handle.weight_bytes < 0.45 * full.handle.weight_bytes
        tokens = generate_text(mm, full, request).result.tokens
        # Teacher-forced on the float32 run's text, so one early flip does not decide the rest of the run.
        prompt = build_prompt_ids(full.tokenizer, request.prompt, chat=False)
        with mm.use(full.handle) as model, torch.inference_mode():
            want = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        with mm.use(packed.handle) as model, torch.inference_mode():
            kv = model.new_kv(len(prompt) + len(tokens))
            got = [model.step(torch.tensor([prompt]), kv)[0]]
            got += [model.step(torch.tensor([[t]]), kv)[0] for t in tokens[:-1]]
    got_logits = torch.stack(got)
    agree = (got_logits.argmax(-1) == want.argmax(-1)).float().mean().item()
    # The scales and activations rounded to bfloat16 (the kernels take no other type), and Q8_0 requantized
    # to one scale per row, move a random tiny model's logits (not trained to be confident) by 0.06-0.10 on
    # average against a mean |logit| of ~1.9 (measured), and its two best logits are often that close, so
    # 100% agreement is not expected here; SmolLM2's figures are in the slow test below.
    diff = (got_logits - want).abs()
    print(
        f"{arch} {qtype.name}: agreement {agree:.0%}, logit difference mean {diff.mean():.3f} max {diff.max():.3f}, logits mean {want.abs().mean():.3f}"
    )
    assert diff.mean() < 0.1 * want.abs().mean()
    assert agree >= 0.75


def test_the_repacked_cache_is_reused_and_follows_the_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(seed=0), path, Q.Q4_0)
    root = tmp_path / "packed"
    writes: list[Path] = []
    real_write = packed_cache._write_packed

    def counting_write(source: Path, dest: Path, on_progress, on_plan=None):  # noqa: ANN001, ANN202
        writes.append(dest)
        return real_write(source, dest, on_progress, on_plan)

    monkeypatch.setattr(packed_cache, "_write_packed", counting_write)
    first = ensure_packed(path, root=root)
    assert ensure_packed(path, root=root) == first and len(writes) == 1  # reused, not repacked
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary folder left
    write_tiny_gguf(tiny_llama(seed=1), path, Q.Q4_0)  # the file is replaced by another model
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    second = ensure_packed(path, root=root)
    assert second != first and second == packed_cache_dir(path, root) and len(writes) == 2
    a = packed_cache.load_packed_model(first, _config(first))
    b = packed_cache.load_packed_model(second, _config(second))
    assert not torch.equal(a.blocks[0].attention.wqkv.data, b.blocks[0].attention.wqkv.data)


def _config(folder: Path):  # noqa: ANN202 -- a transformers config
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder, local_files_only=True)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_smollm2_packed_quality_against_the_float32_copy() -> None:
    """SmolLM2's Q4_1 file: the packed model's greedy tokens and logits vs the dequantized float32 copy."""
    from pipelines.llm.chat import build_prompt_ids
    from pipelines.paths import resolve_model_path

    try:
        path = resolve_model_path("builtin:smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    request = GenerationRequest(
        prompt="What is the capital of France? Answer in one sentence.", max_new_tokens=32
    )
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        full, packed = open_llm(mm, path, keep_quantized="off"), open_llm(mm, path, keep_quantized="on")
        prompt = build_prompt_ids(full.tokenizer, request.prompt)
        ids = torch.tensor([prompt])
        with mm.use(full.handle) as model, torch.inference_mode():
            cache = KVCache(full.config, len(prompt) + 32)
            ref = generate(model, prompt, cache, max_new_tokens=32).tokens  # eos not given: all 32
            want = model(torch.tensor([prompt + ref])).logits[0, len(prompt) - 1 : -1]
        with mm.use(packed.handle) as model, torch.inference_mode():
            got_tokens = generate(
                model, prompt, KVCache(packed.config, len(prompt) + 32, model=model), max_new_tokens=32
            ).tokens
            kv = model.new_kv(len(prompt) + 32)
            got = [model.step(ids, kv)[0]] + [model.step(torch.tensor([[t]]), kv)[0] for t in ref[:-1]]
    got_logits = torch.stack(got)
    agree = sum(a == b for a, b in zip(got_tokens, ref, strict=True)) / 32
    diff = (got_logits - want).abs().max().item()
    print(
        f"SmolLM2 Q4_1 packed vs float32: greedy agreement {agree:.0%} on 32 tokens, max logit difference {diff:.3f} (logits up to {want.abs().max().item():.1f})"
    )
    assert agree >= 0.9
    # Measured 0.93 here on logits up to ~38: bfloat16 activations through 30 layers; 2.0 leaves room for
    # other CPUs' kernels while still failing on a wrong scale or a row out of place (errors of 10+).
    assert diff < 2.0


def test_auto_follows_the_measurement_and_remembers_it(tmp_path: Path, monkeypatch) -> None:
    from pipelines.llm import packed_linear
    from pipelines.llm.runtime import quantized_mode

    calls: list[int] = []

    def probe(faster: bool):  # noqa: ANN202
        def measure() -> tuple[bool, float, float]:
            calls.append(1)
            return faster, 0.001, 0.002

        return measure

    cpu = torch.device("cpu")
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "slow-kernels"))
    monkeypatch.setattr(packed_linear, "packed_kernels_work", probe(False))
    assert quantized_mode(cpu, "auto") == "float"  # packed kernels measured slower here: the float32 copy
    assert quantized_mode(cpu, "on") == "packed" and quantized_mode(cpu, "off") == "float"
    monkeypatch.setenv("NODELOOM_DATA_DIR", str(tmp_path / "fast-kernels"))
    monkeypatch.setattr(packed_linear, "packed_kernels_work", probe(True))
    assert quantized_mode(cpu, "auto") == "packed"
    assert quantized_mode(cpu, "auto") == "packed" and len(calls) == 2  # measured once per machine, then read
    assert quantized_mode(torch.device("cuda"), "auto") == "blocks"  # the packed kernels are CPU ones
    with pytest.raises(ValueError, match="keep_quantized"):
        quantized_mode(cpu, "sometimes")


def test_a_model_the_packed_decoder_lacks_runs_in_float32_under_auto(tmp_path: Path, monkeypatch) -> None:
    from pipelines.llm import gguf_plan
    from pipelines.llm.compact_model import UnsupportedPackedError

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), path, Q.Q4_0)

    def unsupported(config: object) -> CompactConfig:
        raise UnsupportedPackedError("rope scaling 'llama3' is not supported by the packed decoder")

    monkeypatch.setattr(CompactConfig, "from_transformers", staticmethod(unsupported))
    monkeypatch.setattr(gguf_plan, "packed_is_faster", lambda: True)
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        assert open_llm(mm, path, keep_quantized="auto").handle.spec.storage == ""  # the float32 copy
        with pytest.raises(ValueError, match=r"tiny\.gguf: rope scaling 'llama3' .* keep_quantized off"):
            open_llm(mm, path, keep_quantized="on")


def test_a_transformers_folder_under_auto_loads_in_float32(tmp_path: Path, monkeypatch) -> None:
    from pipelines.llm import gguf_plan

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), path, Q.Q4_0)
    monkeypatch.setattr(gguf_plan, "packed_is_faster", lambda: True)
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        folder = open_llm(mm, path, keep_quantized="off").files.folder  # the converted transformers folder
        llm = open_llm(mm, folder, keep_quantized="auto")  # packing is for GGUF files only
        assert not llm.files.from_gguf and llm.handle.spec.storage == ""


def test_a_cancelled_repack_leaves_no_cache(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), path, Q.Q4_1)
    root = tmp_path / "packed"
    stages: list[str] = []

    def cancel_at_repacking(stage: str, done: int, total: int) -> None:
        stages.append(stage)
        if "repacking" in stage:  # what the GUI's Cancel does through the progress callback
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure_packed(path, root=root, on_progress=cancel_at_repacking)
    assert stages[0] == "GGUF: reading metadata (1/3)"
    assert not packed_cache_dir(path, root).exists() and not list(root.iterdir())  # nothing half-written
