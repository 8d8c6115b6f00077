"""SmolLM2 (the built-in GGUF): parity with `model.generate`, streaming text, the nodes, memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memory import BudgetExceeded, MemoryConfig, MemoryManager
from nodes.context import CancelToken
from nodes.events import NodeFailed, NodeProgress, NodeText
from nodes.executor import Executor
from nodes.workflow import load_workflow, workflow_from_dict
from pipelines.llm.chat import build_prompt_ids
from pipelines.llm.detokenize import IncrementalDetokenizer
from pipelines.llm.generate import generate
from pipelines.llm.kv_cache import KVCache
from tests.llm_fixtures import one_thread, smollm, smollm_files  # noqa: F401

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
LLM_WORKFLOW = REPO / "resources" / "workflows" / "llm.json"


def test_greedy_matches_model_generate_on_smollm2(smollm) -> None:  # noqa: F811
    model, tokenizer = smollm
    ids = build_prompt_ids(tokenizer, "Write a short poem about the sea.")
    with torch.inference_mode():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids) :].tolist()
    ours = generate(model, ids, KVCache(model.config, len(ids) + 24), max_new_tokens=24, eos_ids=(2,))
    assert ours.tokens == ref and len(ref) == 24


def test_incremental_detokenizer_streams_whole_characters(smollm) -> None:  # noqa: F811
    _, tokenizer = smollm
    text = "Paris, café — 日本語 🎉🇫🇷 naïve\n  indented   spaces. Done."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(i) for i in ids] + [detok.flush()]
    assert "".join(deltas) == tokenizer.decode(ids) == text
    assert not any("\ufffd" in d for d in deltas)


def _run(workflow, memory: MemoryManager, tmp_path: Path, **kwargs):
    from nodes.registry import default_registry

    events: list = []
    result = Executor(default_registry(entry_point_packs=False), memory=memory).run(
        workflow, out_dir=tmp_path, on_event=events.append, **kwargs
    )
    return result, events


def _llm_workflow(**params) -> dict:
    data = json.loads(LLM_WORKFLOW.read_text())
    data["nodes"]["answer"]["params"].update(params)
    return data


def test_llm_workflow_streams_answer_and_reports_metrics(smollm_files, tmp_path: Path) -> None:  # noqa: F811
    from nodes.registry import default_registry

    memory = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    wf = load_workflow(LLM_WORKFLOW, default_registry(entry_point_packs=False))
    result, events = _run(wf, memory, tmp_path)
    assert result.ok, result.error
    streamed = "".join(e.delta for e in events if isinstance(e, NodeText) and e.node_id == "answer")
    saved = Path(result.nodes["save"].files[0]).read_text()
    assert "Paris" in saved and saved == streamed.strip()
    metrics = result.nodes["answer"].metrics
    for name in ("ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s", "kv_bytes", "tokens"):
        assert metrics[name] > 0, name
    steps = [e for e in events if isinstance(e, NodeProgress) and e.kind == "decode_token"]
    assert len(steps) == metrics["tokens"]
    cfg = json.loads((smollm_files.folder / "config.json").read_text())
    prompt_tokens = int(metrics["prompt_tokens"])
    assert (
        metrics["kv_bytes"]
        == 2 * 30 * (prompt_tokens + 64 - 1) * 3 * 64 * 4
        == 2
        * cfg["num_hidden_layers"]
        * (prompt_tokens + 64 - 1)
        * cfg["num_key_value_heads"]
        * cfg["head_dim"]
        * 4
    )
    # Sequential: the weights were loaded for the node and unloaded right after it.
    report = memory.report()
    assert [e["component"] for e in report["loads"]] == ["llm"]
    assert [e["component"] for e in report["unloads"]] == ["llm"]
    assert memory.ledger.handles[next(iter(memory.ledger.handles))].module is None
    assert not memory.ledger.working  # the KV reservation was released


def test_context_that_cannot_fit_says_what_it_needs(smollm_files, tmp_path: Path) -> None:  # noqa: F811
    from nodes.registry import default_registry

    # stream is the strictest policy: the executor has nothing looser-to-stricter left to retry with, and
    # only the KV cache has to be resident -- 360 MiB for 8192 tokens, more than the whole budget.
    memory = MemoryManager(MemoryConfig(device="cpu", policy="stream", ram_budget="300MB"))
    data = _llm_workflow(context_tokens=8192)
    data["nodes"]["llm"]["params"]["keep_quantized"] = (
        "off"  # the float32 model streams its blocks; packed ones don't
    )
    wf = workflow_from_dict(data, default_registry(entry_point_packs=False))
    result, events = _run(wf, memory, tmp_path)
    assert not result.ok and result.failed_node == "answer"
    failed = next(e for e in events if isinstance(e, NodeFailed))
    assert failed.error_type == "BudgetExceeded"
    assert "a KV cache for 8192 tokens (360.00 MiB) needs 360.00 MiB but only 286.10 MiB" in failed.message
    assert not memory.report()["loads"]  # refused before reading any weights
    with pytest.raises(BudgetExceeded):
        from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm

        llm = open_llm(memory, smollm_files.source)
        generate_text(memory, llm, GenerationRequest("hi", context_tokens=8192))


def test_cancel_stops_generation_mid_stream(smollm_files, tmp_path: Path) -> None:  # noqa: F811
    from nodes.registry import default_registry

    memory = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    wf = workflow_from_dict(
        _llm_workflow(prompt="Write a long story about a dragon.", max_new_tokens=200),
        default_registry(entry_point_packs=False),
    )
    cancel = CancelToken()
    texts: list[str] = []

    def on_event(event) -> None:
        if isinstance(event, NodeText):
            texts.append(event.delta)
            if len(texts) == 3:
                cancel.cancel()

    from nodes.registry import default_registry as registry

    result = Executor(registry(entry_point_packs=False), memory=memory).run(
        wf, out_dir=tmp_path, on_event=on_event, cancel=cancel
    )
    assert result.cancelled and len(texts) == 3
    assert not memory.ledger.working and all(h.module is None for h in memory.ledger.handles.values())
