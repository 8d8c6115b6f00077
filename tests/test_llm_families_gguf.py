"""The LLM families as GGUF files (Llama 3, Qwen2.5, Qwen3, Gemma 3, Mistral), unquantized and quantized.

What a user checks: a family's GGUF loads through `open_llm` (what Load LLM runs) and answers with the tokens
transformers gives on the weights the file holds (float32 copy and kept blocks: every token, for F32, F16, Q8_0
and Q4_0),
its chat template gives the prompt ids the family's own tokenizer gives, the compact decoder (what packed GGUF
weights run on) gives transformers' greedy tokens for every family, the packed model agrees with the float32
copy, a batch of prompts on Qwen3 and Gemma 3 (q/k norms, sliding window) gets each prompt's single run, and
transformers' own GGUF loader reads the same weights from the files as ours.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from memory import MemoryConfig, MemoryManager
from pipelines.llm.chat import build_prompt_ids
from pipelines.llm.compact_model import CompactConfig
from pipelines.llm.generate import generate
from pipelines.llm.kv_cache import KVCache
from pipelines.llm.packed_model import compact_from_float
from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
from pipelines.llm.scheduler import BatchScheduler, SequenceRequest
from tests.llm_families import FAMILIES, family_tokenizer, tiny_family_model
from tests.llm_families_gguf import dequantized_model, write_family_gguf

pytestmark = pytest.mark.slow  # builds, converts and runs models

REQUEST = GenerationRequest(prompt="hello there", system_prompt="be brief", max_new_tokens=16, seed=0)
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gguf_greedy_tokens_equal_transformers_on_the_files_weights(tmp_path: Path, family: str) -> None:
    want_ids = list(
        family_tokenizer(family).apply_chat_template(
            MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )
    for qtype in (Q.F32, Q.F16, Q.Q8_0, Q.Q4_0):
        path = tmp_path / f"tiny-{family}-{qtype.name}.gguf"
        weights = write_family_gguf(family, tiny_family_model(family), path, qtype)
        reference = dequantized_model(tiny_family_model(family), weights)
        with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm, torch.no_grad():
            llm = open_llm(mm, path, keep_quantized="off")
            ids = build_prompt_ids(llm.tokenizer, REQUEST.prompt, system_prompt=REQUEST.system_prompt)
            assert ids == want_ids, qtype.name  # the file's tokenizer and chat template
            ours = generate_text(mm, llm, REQUEST).result.tokens
            # the file's blocks kept and dequantized per layer (the accelerator path): the same float32 numbers
            blocks = open_llm(mm, path, keep_quantized="blocks")
            kept = generate_text(mm, blocks, REQUEST).result.tokens if qtype != Q.F32 else ours
        out = reference.generate(
            torch.tensor([ids]),
            max_new_tokens=16,
            do_sample=False,
            eos_token_id=reference.config.eos_token_id,
        )
        theirs = out[0, len(ids) :].tolist()
        # The float32 copy runs transformers' own model on the weights the file holds (dequantized by gguf-py,
        # un-permuted, Gemma's norms shifted back): the same kernels on the same numbers, every token equal.
        assert ours == theirs, qtype.name
        assert kept == theirs, qtype.name
        assert len(set(theirs)) >= 4, qtype.name  # a varied answer, so equal tokens mean the same model ran


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_compact_decoder_gives_transformers_greedy_tokens_for_every_family(family: str) -> None:
    model = tiny_family_model(family)
    compact = compact_from_float(model.state_dict(), CompactConfig.from_transformers(model.config))
    prompt = [5, 17, 42, 99, 3, 7, 8, 9]  # longer than Gemma's 4-token window: the window matters
    runs = {}
    for name, m in (("transformers", model), ("compact", compact)):
        runs[name] = generate(m, prompt, KVCache(model.config, 40, model=m), max_new_tokens=24).tokens
    assert runs["compact"] == runs["transformers"]
    assert len(set(runs["transformers"])) >= 4
    with torch.inference_mode():
        ids = torch.tensor([prompt])
        want = model(ids).logits[0, -1]
        got = compact.step(ids, compact.new_kv(12))[0]
    # Same float32 math in another op order (fused q/k/v, SDPA's GQA): differences are float32 roundings
    # (seen: <= 2e-6 on logits of ~2-8).
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_gguf_agrees_with_the_float32_copy(tmp_path: Path, family: str) -> None:
    request = GenerationRequest(prompt="hello there", chat=False, max_new_tokens=32)
    for qtype in (Q.Q8_0, Q.Q4_0):
        path = tmp_path / f"tiny-{family}-{qtype.name}.gguf"
        write_family_gguf(family, tiny_family_model(family), path, qtype)
        with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
            full, packed = open_llm(mm, path, keep_quantized="off"), open_llm(mm, path, keep_quantized="on")
            assert packed.handle.spec.storage == "packed"
            tokens = generate_text(mm, full, request).result.tokens
            prompt = build_prompt_ids(full.tokenizer, request.prompt, chat=False)
            with mm.use(full.handle) as model, torch.inference_mode():
                want = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
            with mm.use(packed.handle) as model, torch.inference_mode():
                # teacher-forced on the float32 run's tokens, so one early flip does not decide the rest
                kv = model.new_kv(len(prompt) + len(tokens))
                got = [model.step(torch.tensor([prompt]), kv)[0]]
                got += [model.step(torch.tensor([[t]]), kv)[0] for t in tokens[:-1]]
        got_logits = torch.stack(got)
        agree = (got_logits.argmax(-1) == want.argmax(-1)).float().mean().item()
        # As in test_llm_packed: bfloat16 activations and scales (the kernels take no other type), Q8_0 requantized
        # to one scale per row. Measured here: mean logit difference 0.02-0.10 against a mean |logit| of ~1.9,
        # agreement 88-100%; a missing q/k norm, a wrong (1 + w) or window moves logits by whole units.
        diff = (got_logits - want).abs()
        assert diff.mean() < 0.1 * want.abs().mean(), qtype.name
        assert agree >= 0.75, qtype.name


@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_a_batch_gets_each_prompts_single_run_on_qk_norm_and_sliding_window_families(family: str) -> None:
    model = tiny_family_model(family)
    compact = compact_from_float(model.state_dict(), CompactConfig.from_transformers(model.config))
    prompts = [[5, 17, 42, 99, 3], [7, 8], [100, 101, 102, 103, 104, 105, 106], [9]]
    singles = [
        generate(compact, ids, KVCache(model.config, len(ids) + 12, model=compact), max_new_tokens=12).tokens
        for ids in prompts
    ]
    scheduler = BatchScheduler(compact, slots=3, max_tokens=40)  # 4 prompts, 3 slots: one waits for a slot
    seqs = [scheduler.submit(SequenceRequest(ids, 12)) for ids in prompts]
    scheduler.run()
    # float32 at batch 3 with a padding (and window) mask vs batch 1: roundings only, greedy picks the same
    assert [s.tokens for s in seqs] == singles


# transformers' own GGUF loader reads these families too; its Qwen3 config mapping ignores
# `attention.key_length` (it keeps Qwen3Config's default head_dim of 128), so the tiny Qwen3 (head_dim 16)
# does not load there.
TRANSFORMERS_READS = sorted(set(FAMILIES) - {"qwen3"})


@pytest.mark.parametrize("family", TRANSFORMERS_READS)
def test_our_gguf_reading_equals_transformers_gguf_loader(tmp_path: Path, family: str) -> None:
    """An independent reading of llama.cpp's conventions (Q/K permutation, Gemma's 1 + w norms, names): the
    fixture writer and our loader could share a mistake; transformers' `from_pretrained(gguf_file=)` would not."""
    from transformers import AutoModelForCausalLM

    from pipelines.llm.hf_loader import build_causal_lm, prepare_llm_files

    path = tmp_path / "tiny.gguf"
    write_family_gguf(family, tiny_family_model(family), path, Q.Q8_0)
    theirs = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, dtype=torch.float32
    ).state_dict()
    ours = build_causal_lm(prepare_llm_files(path)).state_dict()
    assert set(ours) == set(theirs)
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), name  # both dequantize with gguf-py: the same numbers


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_flat_decode_step_gives_the_modules_logits(tmp_path: Path, family: str) -> None:
    model = tiny_family_model(family)
    path = tmp_path / f"tiny-{family}-Q4_0.gguf"
    write_family_gguf(family, model, path, Q.Q4_0)
    compact = compact_from_float(model.state_dict(), CompactConfig.from_transformers(model.config))
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        packed = open_llm(mm, path, keep_quantized="on")
        with mm.use(packed.handle) as packed_model, torch.inference_mode():
            for name, m in (("float32", compact), ("packed", packed_model)):
                prompt = torch.tensor([[5, 17, 42, 99, 3, 7, 8, 9]])
                flat, modules = m.new_kv(20), m.new_kv(20)
                m.step(prompt, flat)
                m.forward_modules(prompt, modules)
                token = torch.tensor([[11]])
                for i in range(6):  # past Gemma's 4-token window
                    got, want = m.step(token, flat), m.forward_modules(token, modules)
                    # the same kernels on the same values in the same order: equal bit for bit
                    assert torch.equal(got, want), f"{name}, step {i}"
                    token = got.argmax(-1, keepdim=True)
                assert all(
                    torch.equal(a, b) for a, b in zip(flat.k + flat.v, modules.k + modules.v, strict=True)
                )
