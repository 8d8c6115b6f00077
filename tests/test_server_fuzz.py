"""200 malformed requests against `app serve`: every answer is a clear error and the server keeps serving.

What a user checks: bad JSON, bodies over the limit, path traversal in `/view` and uploads, unknown node types,
wrong methods, bad websocket handshakes, bad chat requests, and (on a server bound to 127.0.0.2 with a token,
a loopback address that is not 127.0.0.1) requests without the token: each gets a 4xx answer whose body is
ComfyUI's error shape or OpenAI's error object, with no traceback text; after all 200 the servers still run a
request. Only loopback addresses are used; the requests are a fixed, seeded list (bounded in count and time).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.server.options import ServeOptions
from memory.config import MemoryConfig
from tests.server_support import run_server

TOKEN = "a-fuzz-token-of-enough-length"
Case = tuple[str, str, str, bytes | None, dict[str, str]]  # (label, method, path, body, headers)
ROUTES = ("/prompt", "/run", "/v1/chat/completions")


def _bad_json(rng: random.Random) -> Iterator[Case]:
    good = json.dumps({"prompt": {"1": {"class_type": "KSampler", "inputs": {"seed": 1}}}}).encode()
    bodies = [
        b"",
        b"{",
        b"not json at all",
        b"\xff\xfe\x00garbage",
        b'{"prompt": NaN}',
        b'{"a": 1, "a": 2}',
        b"[" * 5000 + b"]" * 5000,
        b"null",
        b"42",
        b'"a string"',
    ]
    for _ in range(35):
        cut = rng.randrange(1, len(good))
        bodies.append(good[:cut])  # truncated at a random place
    for i, body in enumerate(bodies):
        yield f"bad json {i}", "POST", ROUTES[i % 3], body, {"Content-Type": "application/json"}


def _huge() -> Iterator[Case]:
    body = b'{"prompt": "' + b"x" * (33 * 2**20) + b'"}'
    for route in ROUTES:
        yield f"huge {route}", "POST", route, body, {}


def _view_traversal() -> Iterator[Case]:
    names = [
        "filename=../secret.txt",
        "filename=secret.txt&subfolder=..",
        "filename=..%2Fsecret.txt",
        "filename=%2Fetc%2Fpasswd",
        "filename=passwd&subfolder=%2Fetc",
        "filename=link.png",
        "filename=made.png&type=../../etc",
        "filename=made.png&type=nonsense",
        "filename=made.png&subfolder=..%2F..%2F..",
        "filename=made%00.png",
        "filename=",
        "",
        "filename=..\\secret.txt",
        "filename=C:%5CWindows%5Cwin.ini",
        "filename=~%2F.bashrc",
        "filename=.&subfolder=.",
        "filename=..",
        "filename=made.png&subfolder=%2Ftmp",
        "filename=" + "a" * 5000,
        "filename=made.png&type=input&subfolder=../out",
    ]
    for i, query in enumerate(names):
        yield f"view {i}", "GET", "/view?" + query, None, {}


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
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), {
        "Content-Type": f"multipart/form-data; boundary={boundary}"
    }


def _uploads() -> Iterator[Case]:
    attempts = [
        ({}, "../escape.png"),
        ({}, "/tmp/escape.png"),
        ({"subfolder": "../.."}, "a.png"),
        ({"subfolder": "/etc"}, "a.png"),
        ({"type": "../output"}, "a.png"),
        ({"type": "nonsense"}, "a.png"),
        ({}, "..\\escape.png"),
        ({"subfolder": "a/../../.."}, "a.png"),
        ({}, ""),
        ({}, "."),
        ({}, ".."),
        ({"subfolder": "x\x00y"}, "a.png"),
        ({}, "a\x00.png"),
        ({"overwrite": "true", "subfolder": "../"}, "b.png"),
        ({}, "a" * 3000 + ".png"),
    ]
    for i, (fields, name) in enumerate(attempts):
        body, headers = _multipart(fields, name, b"\x89PNG\r\n\x1a\nnot really a png")
        yield f"upload {i}", "POST", "/upload/image", body, headers
    for i, (body, ctype) in enumerate(
        [
            (b"plain", "text/plain"),
            (b"--x\r\n", "multipart/form-data; boundary=x"),
            (b"", "multipart/form-data"),
        ]
    ):
        yield f"upload body {i}", "POST", "/upload/image", body, {"Content-Type": ctype}


def _unknown_nodes(rng: random.Random) -> Iterator[Case]:
    for i in range(20):
        name = "".join(rng.choice("abcXYZ_09") for _ in range(rng.randrange(1, 20)))
        prompt = {
            "1": {"class_type": name, "inputs": {}},
            "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
        }
        if i % 4 == 1:
            prompt = {"1": {"class_type": 17, "inputs": []}}
        elif i % 4 == 2:
            prompt = {"1": {"inputs": {"x": ["9", 0]}}}
        elif i % 4 == 3:
            prompt = {"1": {"class_type": "SaveImage", "inputs": {"images": ["404", 0]}}}
        yield f"unknown node {i}", "POST", "/prompt", json.dumps({"prompt": prompt}).encode(), {}
    for i in range(5):
        workflow = {
            "format": "nodeloom.workflow",
            "version": 1,
            "nodes": {"a": {"type": f"Nope{i}", "params": {}}},
        }
        yield f"unknown native node {i}", "POST", "/run", json.dumps({"workflow": workflow}).encode(), {}


def _wrong_methods() -> Iterator[Case]:
    pairs = [
        ("DELETE", "/prompt"),
        ("PUT", "/history"),
        ("GET", "/upload/image"),
        ("POST", "/view"),
        ("PATCH", "/v1/chat/completions"),
        ("GET", "/v1/chat/completions"),
        ("PUT", "/queue"),
        ("DELETE", "/object_info"),
        ("GET", "/interrupt"),
        ("POST", "/object_info"),
        ("GET", "/nothing-here"),
        ("GET", "/../../etc/passwd"),
        ("POST", "/api/nothing"),
        ("OPTIONS", "/prompt"),
        ("PUT", "/run"),
    ]
    for method, path in pairs:
        yield f"{method} {path}", method, path, b"{}" if method != "GET" else None, {}


def _bad_handshakes() -> Iterator[Case]:
    base = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    variants = [
        {},
        {"Upgrade": "websocket"},
        {**base},  # no key
        {**base, "Sec-WebSocket-Key": "short"},
        {**base, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "99"},
        {**base, "Sec-WebSocket-Key": "!!!!not base64!!!!", "Upgrade": "h2c"},
        {"Connection": "keep-alive", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
        {**base, "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "abc"},
        {**base, "Upgrade": "nonsense", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
        {"Upgrade": "websocket", "Connection": "close"},
    ]
    for i, headers in enumerate(variants):
        yield f"ws handshake {i}", "GET", f"/ws?clientId=fuzz{i}", None, headers


def _bad_chats() -> Iterator[Case]:
    bodies: list[Any] = [
        {},
        {"messages": "hi"},
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": "lots"},
        {"messages": [{"role": "user", "content": "x"}], "temperature": 99},
        {"messages": [{"role": "user", "content": "x"}], "top_p": 0},
        {"messages": [{"role": "user", "content": "x"}], "stop": [1, 2]},
        {"messages": [{"role": "user", "content": "x"}], "model": "../../etc/passwd"},
        {"messages": [{"role": "user", "content": "x"}], "model": "/etc/passwd"},
        {"messages": [{"role": "user", "content": "x"}], "model": 12},
        {"messages": [{"role": "user", "content": "x"}], "model": "missing.gguf"},
        {"messages": [{"role": "user", "content": "x"}], "seed": -5},
        [1, 2, 3],
        {"messages": [None]},
        {"messages": [{"role": "assistant", "content": "last is not the user"}]},
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 10**9},
        {"messages": [{"role": "user", "content": "x"}], "stop": "a|b"},
    ]
    for i, body in enumerate(bodies):
        yield f"bad chat {i}", "POST", "/v1/chat/completions", json.dumps(body).encode(), {}


def open_cases(rng: random.Random) -> list[Case]:
    cases = [
        *_bad_json(rng),
        *_huge(),
        *_view_traversal(),
        *_uploads(),
        *_unknown_nodes(rng),
        *_wrong_methods(),
        *_bad_handshakes(),
        *_bad_chats(),
    ]
    rng.shuffle(cases)
    return cases


def token_cases() -> list[Case]:
    paths = [("GET", "/queue"), ("GET", "/object_info"), ("POST", "/prompt"), ("GET", "/view?filename=x")]
    paths += [("POST", "/v1/chat/completions"), ("GET", "/history"), ("POST", "/interrupt"), ("POST", "/run")]
    paths += [("GET", "/ws?clientId=a"), ("POST", "/upload/image")]
    cases: list[Case] = []
    for method, path in paths:
        body = b"{}" if method == "POST" else None
        for label, headers in (
            ("no token", {}),
            ("wrong token", {"Authorization": "Bearer wrong-token-of-enough-length"}),
            ("not bearer", {"Authorization": f"Basic {TOKEN}"}),
            ("empty bearer", {"Authorization": "Bearer "}),
        ):
            cases.append((f"{label} {method} {path}", method, path, body, headers))
    ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    ws["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    for i, query in enumerate(["", "&token=wrong-token-of-enough-length", "&token=", "&token=" + TOKEN[:-1]]):
        cases.append((f"ws without the token {i}", "GET", f"/ws?clientId=t{i}{query}", None, ws))
    return cases


def send(host: str, port: int, case: Case) -> tuple[int, bytes]:
    _, method, path, body, headers = case
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except (ConnectionResetError, BrokenPipeError):  # the server may close on a body over the limit
        return 413, b""
    finally:
        conn.close()


def check_error(case: Case, status: int, body: bytes) -> None:
    label = case[0]
    assert 400 <= status < 500, (label, status, body[:300])
    assert b"Traceback" not in body and b'File "' not in body, (label, body[:300])
    if not body and status == 413:
        return  # the connection was closed while the oversized body was still being sent
    error = json.loads(body)["error"]
    comfy = {"type", "message", "details", "extra_info"} <= set(error)
    openai = {"message", "type", "param", "code"} <= set(error)
    assert comfy or openai, (label, error)
    assert isinstance(error["message"], str) and error["message"], (label, error)


def _options(root: Path, **kw: Any) -> ServeOptions:
    return ServeOptions(
        out_dir=root / "out",
        input_dir=root / "input",
        memory=MemoryConfig(device="cpu", data_dir=root / "memory-data"),
        **kw,
    )


@pytest.mark.slow  # ~10-30 s: 200 requests, three of them 33 MiB bodies, against two servers
def test_200_malformed_requests_get_clear_errors_and_the_server_stays_up(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "made.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "secret.txt").write_text("private")
    os.symlink(tmp_path / "secret.txt", tmp_path / "out" / "link.png")
    cases = open_cases(random.Random(31))
    guarded = token_cases()
    assert len(cases) + len(guarded) >= 200, len(cases) + len(guarded)
    with run_server(_options(tmp_path)) as server:
        host, port = server.base.removeprefix("http://").split(":")
        for case in cases:
            status, body = send(host, int(port), case)
            check_error(case, status, body)
        assert send(host, int(port), ("alive", "GET", "/queue", None, {}))[0] == 200
        status, body = send(host, int(port), ("alive", "GET", "/view?filename=made.png", None, {}))
        assert status == 200 and body.startswith(b"\x89PNG")
    assert not (tmp_path / "escape.png").exists() and not (tmp_path.parent / "escape.png").exists()

    try:
        context = run_server(_options(tmp_path / "guarded", host="127.0.0.2", token=TOKEN))
        server = context.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    try:
        host, port = server.base.removeprefix("http://").split(":")
        for case in guarded:
            status, body = send(host, int(port), case)
            assert status == 401, (case[0], status)
            check_error(case, status, body)
        ok = ("alive", "GET", "/queue", None, {"Authorization": f"Bearer {TOKEN}"})
        assert send(host, int(port), ok)[0] == 200
    finally:
        context.__exit__(None, None, None)
