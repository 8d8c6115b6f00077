"""`app serve`'s chat batch: chats join a running batch from the queue front, between decode steps.

What a user checks: a chat sent while another one is being decoded joins it (its timings say it shared steps)
and still gets the answer it gets alone; a graph queued before a chat is never overtaken by it; a chat whose
prompt is longer than the model's context is refused as a bad request (OpenAI's 400), not a server error.
"""

from __future__ import annotations

import http.client as http_client
import json

import pytest
from gguf import GGMLQuantizationType

from app.server.jobs import Job, JobQueue
from app.server.options import ServeOptions
from memory import MemoryConfig
from nodes.workflow import Workflow
from pipelines.models_library import ModelsLibrary
from tests.llm_fixtures import tiny_llama, write_tiny_gguf
from tests.server_support import http, run_server


def _job(queue: JobQueue, pid: str, chat: object = None) -> Job:
    job = Job(queue.next_number(False), pid, {}, {}, [], Workflow(source=pid))
    job.chat = chat
    return job


def test_only_the_queue_front_joins_a_running_batch() -> None:
    queue = JobQueue()
    for job in (_job(queue, "chat-1", "m"), _job(queue, "graph"), _job(queue, "chat-2", "m")):
        queue.put(job)
    first = queue.take()
    assert first is not None and first.prompt_id == "chat-1"
    is_chat = lambda job: job.chat == "m"  # noqa: E731
    assert queue.take_joining(is_chat) is None  # the graph is at the front: chat-2 waits behind it
    queue2 = JobQueue()
    for job in (_job(queue2, "a", "m"), _job(queue2, "b", "m"), _job(queue2, "c", "other")):
        queue2.put(job)
    running = queue2.take()
    joined = queue2.take_joining(is_chat)
    assert joined is not None and joined.prompt_id == "b"
    assert queue2.take_joining(is_chat) is None  # "c" is another model's
    assert [j.prompt_id for j in queue2.running_jobs()] == ["a", "b"] and queue2.remaining() == 3
    queue2.finish(joined, {})
    assert queue2.known("b") and [j.prompt_id for j in queue2.running_jobs()] == ["a"]
    assert running is not None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("chat-queue")
    (root / "models").mkdir()
    write_tiny_gguf(tiny_llama(), root / "models" / "tiny.gguf", GGMLQuantizationType.Q8_0)
    options = ServeOptions(
        out_dir=root / "out",
        input_dir=root / "in",
        memory=MemoryConfig(device="cpu", data_dir=root / "memory-data"),
        library=ModelsLibrary([root / "models"]),
    )
    with run_server(options) as running:
        yield running


def _chat(server, content: str, max_tokens: int, **extra) -> tuple[int, dict]:
    body = {
        "model": "tiny.gguf",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    }
    status, reply = http(server.base, "/v1/chat/completions", json.dumps({**body, **extra}).encode())
    return status, json.loads(reply)


@pytest.mark.slow  # ~2-5 s: a server with a tiny model, a long chat and one that joins it
def test_a_chat_sent_during_another_joins_its_batch_and_answers_as_alone(server) -> None:
    assert _chat(server, "warm up", 2)[0] == 200  # the model is loaded before the timing below
    host, port = server.base.removeprefix("http://").split(":")
    conn = http_client.HTTPConnection(host, int(port), timeout=120)
    # "tell me more": the tiny model's greedy answer runs all 220 tokens without an end of turn (checked)
    body = {
        "model": "tiny.gguf",
        "messages": [{"role": "user", "content": "tell me more"}],
        "max_tokens": 220,
    }
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}))
    stream = conn.getresponse()
    assert stream.status == 200
    while b'"content": ""' in (line := stream.readline()) or not line.startswith(b"data: {"):
        pass  # up to the first generated delta: the long chat is decoding now
    status, joined = _chat(server, "the cat", 12)  # sent while the long one decodes
    rest = stream.read().decode()
    conn.close()
    assert status == 200
    assert joined["timings"]["batch_size"] == 2, joined["timings"]  # decoded together with the long one
    events = [json.loads(e.removeprefix("data: ")) for e in rest.split("\n\n") if e.startswith("data: {")]
    assert events[-1]["timings"]["batch_size"] == 2 and events[-1]["usage"]["completion_tokens"] == 220
    _, alone = _chat(server, "the cat", 12)
    assert alone["timings"]["batch_size"] == 1
    assert joined["choices"][0]["message"]["content"] == alone["choices"][0]["message"]["content"]


@pytest.mark.slow  # shares the server above
def test_a_prompt_over_the_models_context_is_a_bad_request(server) -> None:
    status, reply = _chat(server, "hello " * 400, 4)  # the tiny model's context is 256 positions
    assert status == 400 and reply["error"]["type"] == "invalid_request_error", reply
    assert "256" in reply["error"]["message"]
