"""`app serve` refusing what it must: malformed bodies, huge bodies, paths out of their folders, unknown
node types, requests without the token; and the queue's order (ComfyUI's `number`/`front`).

Each refusal is ComfyUI's error shape (`{"error": {type, message, details, extra_info}, "node_errors"}`)
with a status a client can act on, and never a traceback. Only loopback addresses are used.
"""

from __future__ import annotations

import json
import os
import uuid
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from app.server.jobs import Job, JobQueue
from app.server.options import ServeOptions, bind_problem, token_matches
from app.server.serve import serve_command
from memory.config import MemoryConfig
from nodes.registry import default_registry
from nodes.workflow import Workflow
from tests.server_support import comfy_demo_prompt, http, run_server

TOKEN = "a-test-token-of-enough-length"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("serve")
    (root / "out").mkdir()
    (root / "out" / "made.png").write_bytes(_png())
    (root / "secret.txt").write_text("private")
    os.symlink(root / "secret.txt", root / "out" / "link.png")
    options = ServeOptions(
        out_dir=root / "out",
        input_dir=root / "input",
        memory=MemoryConfig(device="cpu", data_dir=root / "memory-data"),
    )
    with run_server(options) as running:
        yield running


def _png(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buffer = BytesIO()
    Image.new("RGB", (8, 8), color).save(buffer, format="PNG")
    return buffer.getvalue()


def _error(status: int, body: bytes) -> dict:
    data = json.loads(body)
    assert set(data["error"]) == {"type", "message", "details", "extra_info"}, data
    assert "Traceback" not in body.decode()
    return data


def _multipart(fields: dict[str, str], filename: str, content: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{filename}"\r\n'
        "Content-Type: image/png\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def test_bad_json_and_a_missing_prompt_get_comfyuis_error_shape(server) -> None:
    status, body = http(server.base, "/prompt", b'{"prompt": {"3": ')
    assert status == 400 and _error(status, body)["error"]["type"] == "invalid_json"
    status, body = http(server.base, "/prompt", b'{"client_id": "x"}')
    assert status == 400 and _error(status, body)["error"]["type"] == "no_prompt"
    status, body = http(server.base, "/prompt", b'{"prompt": {"a": 1}, "prompt": {}}')  # a key twice
    assert status == 400 and "appears twice" in _error(status, body)["error"]["message"]
    status, body = http(server.base, "/prompt", json.dumps({"prompt": "not a graph"}).encode())
    assert status == 400 and "ComfyUI API graph" in _error(status, body)["error"]["message"]


def test_a_body_over_the_limit_is_refused(server) -> None:
    huge = b'{"prompt": "' + b"x" * (33 * 2**20) + b'"}'
    status, body = http(server.base, "/prompt", huge)
    assert status == 413 and "32 MiB" in _error(status, body)["error"]["message"]
    assert http(server.base, "/queue")[0] == 200  # and the server is still there


def test_unknown_node_types_are_named_in_node_errors(server) -> None:
    prompt = comfy_demo_prompt()
    prompt["10"] = {"class_type": "NoSuchNode", "inputs": {"image": ["8", 0]}}
    status, body = http(server.base, "/prompt", json.dumps({"prompt": prompt}).encode())
    data = _error(status, body)
    assert status == 400 and data["error"]["type"] == "invalid_prompt"
    assert "NoSuchNode" in data["error"]["message"] and data["error"]["details"] == "Node ID '#10'"
    assert data["node_errors"]["10"]["class_type"] == "NoSuchNode"
    assert http(server.base, "/queue")[1] == b'{"queue_running": [], "queue_pending": []}'


def test_request_paths_stay_inside_the_models_folders(server) -> None:
    prompt = comfy_demo_prompt()
    prompt["4"]["inputs"]["ckpt_name"] = "/etc/passwd"
    status, body = http(server.base, "/prompt", json.dumps({"prompt": prompt}).encode())
    data = _error(status, body)
    assert status == 400 and "absolute path" in data["node_errors"]["4"]["errors"][0]["message"]


@pytest.mark.parametrize(
    "query",
    [
        "filename=secret.txt&subfolder=..",
        "filename=../secret.txt",
        "filename=%2Fetc%2Fpasswd",
        "filename=secret.txt&subfolder=%2F",
        "filename=link.png",  # a link out of the output folder
        "filename=made.png&type=elsewhere",
    ],
)
def test_view_refuses_names_out_of_its_folders(server, query: str) -> None:
    status, body = http(server.base, "/view?" + query)
    assert status in (400, 403), (status, body)
    assert b"private" not in body and b"root:" not in body
    _error(status, body)


def test_view_serves_a_file_of_the_output_folder(server) -> None:
    status, body = http(server.base, "/view?filename=made.png&type=output&subfolder=")
    assert status == 200 and body == _png()
    assert http(server.base, "/view?filename=missing.png")[0] == 404


def test_uploads_land_in_the_input_folder_and_nowhere_else(server) -> None:
    body, headers = _multipart({"subfolder": "", "type": "input"}, "pic.png", _png())
    status, reply = http(server.base, "/upload/image", body, headers)
    assert status == 200 and json.loads(reply) == {"name": "pic.png", "subfolder": "", "type": "input"}
    assert (server.options.input_dir / "pic.png").read_bytes() == _png()
    body, headers = _multipart({}, "pic.png", _png((1, 2, 3)))  # the name taken: another one, as ComfyUI
    assert json.loads(http(server.base, "/upload/image", body, headers)[1])["name"] == "pic (1).png"
    for fields, name in (
        ({"subfolder": "../../x"}, "pic.png"),
        ({}, "../escape.png"),
        ({"subfolder": "/tmp"}, "a.png"),
    ):
        body, headers = _multipart(fields, name, _png())
        status, reply = http(server.base, "/upload/image", body, headers)
        assert status in (400, 403), (fields, name, status)
        _error(status, reply)
    body, headers = _multipart({}, "notes.png", b"#!/bin/sh\necho not a picture\n")
    status, reply = http(server.base, "/upload/image", body, headers)
    assert status == 400 and "not a picture" in _error(status, reply)["error"]["message"]
    assert not (server.options.out_dir.parent / "escape.png").exists()


def test_object_info_lists_our_node_types_in_comfyuis_shape(server) -> None:
    status, body = http(server.base, "/object_info")
    info = json.loads(body)
    assert status == 200 and info["SaveImage"]["output_node"] is True
    seed = info["Sampler"]["input"]["required"]["seed"]
    assert seed[0] == "INT" and seed[1]["control_after_generate"] is True
    assert info["Sampler"]["input"]["required"]["positive"][0] == "CONDITIONING"
    assert json.loads(http(server.base, "/api/object_info/SaveImage")[1]).keys() == {"SaveImage"}


def test_a_page_from_another_site_cannot_post(server) -> None:
    headers = {"Origin": "http://evil.example"}
    status, body = http(server.base, "/prompt", b"{}", headers)
    assert status == 403 and _error(status, body)["error"]["type"] == "forbidden"


def test_startup_refuses_a_non_loopback_address_without_a_token(capsys) -> None:
    assert serve_command(["--host", "0.0.0.0"], default_registry) == 2
    assert "--auth-token" in capsys.readouterr().err
    assert bind_problem("192.168.1.5", None) is not None and bind_problem("::1", None) is None
    assert bind_problem("0.0.0.0", TOKEN) is None and bind_problem("0.0.0.0", "short") is not None
    assert token_matches(TOKEN, f"Bearer {TOKEN}", None) and not token_matches(
        TOKEN, "Bearer nope", TOKEN[:-1]
    )


def test_with_a_token_every_request_without_it_gets_401(tmp_path: Path) -> None:
    import asyncio

    import aiohttp

    options = ServeOptions(
        host="127.0.0.2",  # loopback, yet not 127.0.0.1
        out_dir=tmp_path / "out",
        input_dir=tmp_path / "in",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        token=TOKEN,
    )
    try:
        context = run_server(options)
        server = context.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    try:
        for path, data in (
            ("/queue", None),
            ("/object_info", None),
            ("/prompt", b"{}"),
            ("/view?filename=x", None),
        ):
            status, body = http(server.base, path, data)
            assert status == 401 and _error(status, body)["error"]["type"] == "unauthorized", path
            assert http(server.base, path, data, {"Authorization": "Bearer wrong-token-123456"})[0] == 401
        assert http(server.base, "/queue", None, {"Authorization": f"Bearer {TOKEN}"})[0] == 200

        async def ws(url: str) -> int:
            async with aiohttp.ClientSession() as session:
                try:
                    async with session.ws_connect(url) as sock:
                        return (await sock.receive_json())["type"] == "status" and 101
                except aiohttp.WSServerHandshakeError as exc:
                    return exc.status

        ws_url = server.base.replace("http", "ws") + "/ws?clientId=a"
        assert asyncio.run(ws(ws_url)) == 401
        assert asyncio.run(ws(ws_url + f"&token={TOKEN}")) == 101
    finally:
        context.__exit__(None, None, None)


def _job(queue: JobQueue, pid: str, front: bool = False, number: float | None = None) -> Job:
    n = queue.next_number(front) if number is None else number
    return Job(n, pid, {}, {}, [], Workflow(source=pid))


def test_queue_order_front_number_delete_and_clear() -> None:
    queue = JobQueue()
    for job in (
        _job(queue, "a"),
        _job(queue, "b"),
        _job(queue, "c", front=True),
        _job(queue, "d", number=0.5),
    ):
        queue.put(job)
    assert [j.prompt_id for j in queue.pending()] == ["c", "a", "d", "b"]
    assert [j.prompt_id for j in queue.delete(["d"])] == ["d"]
    first = queue.take(timeout=1)
    assert first is not None and first.prompt_id == "c" and queue.remaining() == 3
    assert queue.interrupt("other") is False and queue.interrupt("c") is True and first.cancel.cancelled
    assert [j.prompt_id for j in queue.wipe()] == ["a", "b"] and queue.remaining() == 1
    small = JobQueue(max_pending=2)
    small.put(_job(small, "x"))
    assert not small.full()
    small.put(_job(small, "y"))
    assert small.full()  # POST /prompt then answers 503 queue_full


def test_a_graph_without_an_output_node_is_refused(server) -> None:
    prompt = {"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "builtin:shapes-sd"}}}
    status, body = http(server.base, "/prompt", json.dumps({"prompt": prompt}).encode())
    assert status == 400 and _error(status, body)["error"]["type"] == "prompt_no_outputs"


def test_the_token_can_come_from_a_file(tmp_path: Path, capsys) -> None:
    from app.server.serve import build_serve_parser, options_from_args

    token_file = tmp_path / "token.txt"
    token_file.write_text(f"{TOKEN}\n")
    args = build_serve_parser().parse_args(["--host", "0.0.0.0", "--auth-token-file", str(token_file)])
    assert options_from_args(args).token == TOKEN
    token_file.write_text("\n")
    assert serve_command(["--host", "0.0.0.0", "--auth-token-file", str(token_file)], default_registry) == 2
    assert "the file is empty" in capsys.readouterr().err


def test_a_full_queue_answers_503(server) -> None:
    from app.server.state import STATE

    queue = server.app[STATE].queue
    limit, queue.max_pending = queue.max_pending, 0
    try:
        status, body = http(server.base, "/prompt", json.dumps({"prompt": comfy_demo_prompt()}).encode())
    finally:
        queue.max_pending = limit
    assert status == 503 and _error(status, body)["error"]["type"] == "queue_full"
