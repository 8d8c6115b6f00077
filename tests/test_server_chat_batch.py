"""`app serve`'s chats on SmolLM2: the real `openai` client, and concurrent chats decoded in one batch.

What a user checks: the `openai` Python client streams a chat completion from `app serve` (the command, on
a free loopback port) and the text is `llm.json`'s greedy answer to the same prompt; four chats sent at once
are decoded together (the response's timings say so) and each gets the answer it gets alone; usage and
timings come with every answer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.history_file import read_history
from app.server.options import ServeOptions
from memory import MemoryConfig
from pipelines.models_library import ModelsLibrary
from tests.server_support import run_server

openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parent.parent
LLM_JSON = ROOT / "resources" / "workflows" / "llm.json"


def _smollm_or_skip() -> None:
    from pipelines.paths import resolve_model_path

    try:
        resolve_model_path("builtin:smollm2")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def _graph_answer(tmp_path: Path) -> tuple[dict, str]:
    """(llm.json's LLMGenerate params, the text the graph gives), run as `app --run` runs it."""
    from memory import MemoryManager
    from nodes.executor import Executor
    from nodes.registry import default_registry
    from nodes.workflow import workflow_from_dict

    data = json.loads(LLM_JSON.read_text())
    registry = default_registry()
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path / "m")) as memory:
        result = Executor(registry, memory).run(workflow_from_dict(data, registry), out_dir=tmp_path / "o")
    assert result.ok, result.error
    return data["nodes"]["answer"]["params"], result.outputs["answer"]["text"]


@pytest.mark.slow  # ~30-60 s: SmolLM2 through the graph, then `app serve` started as a command
def test_the_openai_client_streams_llm_jsons_answer_from_app_serve(tmp_path: Path) -> None:
    _smollm_or_skip()
    params, want = _graph_answer(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "app.main", "serve", "--port", "0", "--out", str(tmp_path / "out")]
    command += ["--input-dir", str(tmp_path / "in")]
    server = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:  # "serving on http://127.0.0.1:PORT ..."
            if found := re.search(r"serving on (http://127\.0\.0\.1:\d+)", line):
                break
        else:
            pytest.fail("app serve ended without serving")
        threading.Thread(target=server.stderr.read, daemon=True).start()  # keep its pipe drained
        client = openai.OpenAI(base_url=found.group(1) + "/v1", api_key="unused", timeout=300)
        stream = client.chat.completions.create(
            model="smollm2",
            messages=[
                {"role": "system", "content": params["system_prompt"]},
                {"role": "user", "content": params["prompt"]},
            ],
            max_tokens=params["max_new_tokens"],
            stream=True,
        )
        chunks = list(stream)
    finally:
        server.terminate()
        server.wait(30)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([p for p in pieces if p]) >= 2  # streamed token by token, not one block
    assert "".join(pieces).strip() == want
    last = chunks[-1].model_dump()
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    assert last["usage"]["completion_tokens"] > 0 and last["timings"]["ttft_s"] > 0


@pytest.mark.slow  # ~40-80 s: SmolLM2, four chats at once then each alone
def test_concurrent_chats_are_decoded_together_and_answer_as_alone(tmp_path: Path) -> None:
    _smollm_or_skip()
    questions = [
        "What is the capital of France?",
        "Name a colour.",
        "What is two plus two?",
        "Why is grass green?",
    ]
    options = ServeOptions(
        out_dir=tmp_path / "out",
        input_dir=tmp_path / "in",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        library=ModelsLibrary([]),
    )
    with run_server(options) as server:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", timeout=300)

        def ask(question: str) -> dict:
            reply = client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=24
            )
            return reply.model_dump()

        ask("Hello")  # load the model first: the four below then arrive while none runs
        together: list[dict | None] = [None] * 4
        threads = [
            threading.Thread(target=lambda i=i: together.__setitem__(i, ask(questions[i]))) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        alone = [ask(q) for q in questions]
    assert all(r is not None for r in together)
    # Decoded in one batch: at least one of them shared its steps with two or more others.
    assert max(r["timings"]["batch_size"] for r in together) >= 3, [r["timings"] for r in together]
    assert all(r["timings"]["batch_size"] == 1 for r in alone)
    same = [
        a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
        for a, b in zip(together, alone, strict=True)
    ]
    # Batched greedy equals single greedy but for a bfloat16 near-tie (tests/test_llm_batch.py); all 4 here.
    assert sum(same) >= 3, [r["choices"][0]["message"]["content"] for r in (*together, *alone)]
    texts = {e.texts.get("generate") for e in read_history(tmp_path / "out")}  # the editor's history panel
    assert {r["choices"][0]["message"]["content"] for r in together} <= texts
    for r in together:
        assert r["usage"]["prompt_tokens"] > 0 and 0 < r["usage"]["completion_tokens"] <= 24
        assert r["timings"]["ttft_s"] > 0 and r["timings"]["tokens_per_s"] > 0
