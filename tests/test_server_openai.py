"""`app serve`'s OpenAI-compatible `POST /v1/chat/completions`: answered by the LLM graph on the server's
queue, plain and streamed, with a tiny random Llama exported as GGUF into a models folder.

What a user checks: the answer is OpenAI's `chat.completion` shape with the text the same LLM graph gives
when run directly; streaming sends that text as `chat.completion.chunk` deltas ending with `[DONE]`; names
out of the models folders and malformed requests get OpenAI's error shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from app.server.openai_chat import GENERATE, chat_workflow
from app.server.options import ServeOptions
from memory import MemoryConfig, MemoryManager
from nodes.executor import Executor
from nodes.registry import default_registry
from nodes.workflow import workflow_from_dict
from pipelines.models_library import ModelsLibrary
from tests.llm_fixtures import tiny_llama, write_tiny_gguf
from tests.server_support import http, run_server

REQUEST = {"model": "tiny.gguf", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("llm-models")
    write_tiny_gguf(tiny_llama(), root / "tiny.gguf", GGMLQuantizationType.F32)
    return root


@pytest.fixture(scope="module")
def server(models: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("llm-serve")
    options = ServeOptions(
        out_dir=tmp / "out",
        input_dir=tmp / "in",
        memory=MemoryConfig(device="cpu", data_dir=tmp / "memory-data"),
        library=ModelsLibrary([models]),
    )
    with run_server(options) as running:
        yield running


def _post(server, body: dict) -> tuple[int, bytes]:
    return http(server.base, "/v1/chat/completions", json.dumps(body).encode())


def test_a_chat_completion_is_the_llm_graphs_text(server, models: Path, tmp_path: Path) -> None:
    status, body = _post(server, REQUEST)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["object"] == "chat.completion" and answer["model"] == "tiny.gguf"
    (choice,) = answer["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length")
    assert 0 < answer["usage"]["completion_tokens"] <= 6 and answer["usage"]["prompt_tokens"] > 0

    # The same graph run directly (greedy, same weights and kernels): the same text.
    data, _, _ = chat_workflow(REQUEST, ModelsLibrary([models]))
    data["nodes"]["llm"]["params"]["path"] = str(models / "tiny.gguf")
    registry = default_registry()
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path / "m")) as memory:
        result = Executor(registry, memory).run(workflow_from_dict(data, registry), out_dir=tmp_path / "o")
    assert result.ok, result.error
    assert choice["message"]["content"] == result.outputs[GENERATE]["text"]


def test_streaming_sends_the_text_as_deltas(server) -> None:
    request = {**REQUEST, "messages": [{"role": "user", "content": "stream this"}]}
    status, body = _post(server, {**request, "stream": True})  # first: generated live, token by token
    assert status == 200
    status, plain = _post(server, request)  # then the same request, not streamed (greedy: the same text)
    events = [line.removeprefix("data: ") for line in body.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert len([p for p in pieces if p]) >= 2, pieces  # live deltas, not the whole text at the end
    text = "".join(pieces)
    assert text.strip() == json.loads(plain)["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({**REQUEST, "model": "/etc/passwd"}, "model"),
        ({**REQUEST, "model": "../tiny.gguf"}, "model"),
        ({**REQUEST, "model": "missing.gguf"}, "model"),
        ({"model": "tiny.gguf"}, "messages"),
        ({**REQUEST, "messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ({**REQUEST, "max_tokens": 0}, "max_tokens"),
        ({**REQUEST, "stop": 3}, "stop"),
    ],
)
def test_bad_chat_requests_get_openais_error_shape(server, body: dict, param: str) -> None:
    status, reply = _post(server, body)
    error = json.loads(reply)["error"]
    assert status == 400 and error["param"] == param and error["type"] == "invalid_request_error", error
    assert "Traceback" not in reply.decode()
