"""Test helpers for `app serve`: a server in a background thread on a free loopback port, and a client
written like ComfyUI's `script_examples/websockets_api_example.py` (urllib for HTTP, a websocket read until
`executing` with `node: null`).

Lives here: `RunningServer`, `run_server`, `http`, `follow_prompt`, `comfy_demo_prompt`. Imports aiohttp,
`app.server`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from app.server.options import ServeOptions
from app.server.serve import build_app, start_site
from nodes.registry import default_registry

DATA = Path(__file__).resolve().parent / "data" / "comfy"


@dataclass
class RunningServer:
    base: str  # http://127.0.0.1:PORT
    options: ServeOptions
    app: Any


@contextmanager
def run_server(options: ServeOptions) -> Iterator[RunningServer]:
    """Serve `options` (its port ignored: a free one is picked) until the block ends; the memory manager is
    closed on the way out (the app's shutdown stops the worker)."""
    app = build_app(options, default_registry())
    ready = threading.Event()
    box: dict[str, Any] = {}

    def main() -> None:
        async def serve() -> None:
            try:
                runner, port = await start_site(app, options.host, 0)
            except BaseException as exc:
                box["error"] = exc
                ready.set()
                raise
            box["port"], box["loop"], stop = port, asyncio.get_running_loop(), asyncio.Event()
            box["stop"] = stop
            ready.set()
            await stop.wait()
            await runner.cleanup()

        asyncio.run(serve())

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(60), "the server did not start"
    if "error" in box:
        raise box["error"]
    try:
        yield RunningServer(f"http://{options.host}:{box['port']}", options, app)
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(60)


def http(
    base: str, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """(status, body) of one request; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(base + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def follow_prompt(
    base: str,
    prompt: dict[str, Any],
    client_id: str,
    prompt_id: str,
    token: str | None = None,
    on_message: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """As ComfyUI's example does: open /ws?clientId=, POST /prompt {prompt, client_id, prompt_id}, then read
    messages until `executing` with `node: null` for this prompt. Returns every JSON message received;
    `on_message` (run off the event loop: it may make requests) sees each as it arrives."""

    async def go() -> list[dict[str, Any]]:
        ws_url = base.replace("http://", "ws://") + f"/ws?clientId={client_id}"
        if token:
            ws_url += f"&token={token}"
        messages: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
            body = json.dumps({"prompt": prompt, "client_id": client_id, "prompt_id": prompt_id}).encode()
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            # The example posts with urllib and no content type: the same here.
            status, reply = await asyncio.get_running_loop().run_in_executor(
                None, http, base, "/prompt", body, headers
            )
            assert status == 200, reply
            while True:
                msg = await asyncio.wait_for(ws.receive(), 300)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    assert msg.type == aiohttp.WSMsgType.BINARY, msg
                    continue  # previews are binary data
                message = json.loads(msg.data)
                messages.append(message)
                if on_message is not None:
                    await asyncio.get_running_loop().run_in_executor(None, on_message, message)
                data = message["data"]
                if message["type"] == "executing" and data["node"] is None and data["prompt_id"] == prompt_id:
                    return messages

    return asyncio.run(go())


def comfy_demo_prompt(steps: int = 4, size: int = 64, seed: int = 5) -> dict[str, Any]:
    """ComfyUI's default SD1.5 graph (API format), aimed at the built-in demo model and made small."""
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["4"]["inputs"]["ckpt_name"] = "builtin:shapes-sd"
    prompt["3"]["inputs"].update(steps=steps, seed=seed)
    prompt["5"]["inputs"].update(width=size, height=size)
    prompt["6"]["inputs"]["text"] = "a red circle"
    return prompt
