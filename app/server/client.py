"""A client for a running `app serve`, Qt-free: what the editor's "Connect to server" builds on.

Lives here: `ServerClient`, `ServerError`. Imports the standard library and aiohttp (its websocket client).

`run(workflow)` sends a Nodeloom workflow to `POST /run` under this client's id while it follows the
websocket, so `on_message` sees each ComfyUI-shaped message (`executing`, `progress`, `executed`, ...) of
that run as it happens; it returns `/run`'s reply (`ok`, `error`, `outputs`, `run`, `memory`). `fetch`
reads an output back through `/view`. The token, when the server has one, goes with every request.
Blocking calls: run them off a GUI thread.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp


class ServerError(Exception):
    """The server refused a request or could not be reached; the message is its error's message."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        self.status, self.body = status, body
        super().__init__(message)


class ServerClient:
    def __init__(self, base: str, token: str | None = None, timeout: float = 3600.0) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.client_id = uuid.uuid4().hex

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, path: str, body: Any = None) -> Any:
        """GET (no body) or POST JSON; the reply's JSON (or bytes when it is not JSON)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {**self._headers(), **({"Content-Type": "application/json"} if data is not None else {})}
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                reply = json.loads(raw)
                error = reply["error"]
                details = error.get("details") if isinstance(error, dict) else None
                message = f"{error['message']}: {details}" if details else error["message"]
            except (ValueError, KeyError, TypeError):
                reply, message = raw, raw[:200].decode(errors="replace")
            raise ServerError(f"{path}: {message}", exc.code, reply) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(f"cannot reach {self.base}: {getattr(exc, 'reason', exc)}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw

    def fetch(self, image: dict[str, str]) -> bytes:
        """An output's bytes, from a `{filename, subfolder, type}` reference."""
        data = self.request("/view?" + urllib.parse.urlencode(image))
        return data if isinstance(data, bytes) else json.dumps(data).encode()

    def interrupt(self) -> None:
        self.request("/interrupt", {})

    def run(
        self, workflow: dict[str, Any], on_message: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """Run `workflow` on the server, calling `on_message` with each websocket message of this client."""
        return asyncio.run(self._run(workflow, on_message or (lambda message: None)))

    async def _run(
        self, workflow: dict[str, Any], on_message: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        query = {"clientId": self.client_id, **({"token": self.token} if self.token else {})}
        url = self.base.replace("http", "ws", 1) + "/ws?" + urllib.parse.urlencode(query)
        loop = asyncio.get_running_loop()
        try:
            async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
                reply = loop.run_in_executor(
                    None, self.request, "/run", {"workflow": workflow, "client_id": self.client_id}
                )
                reader = asyncio.ensure_future(self._follow(ws, on_message))
                try:
                    return await reply
                finally:
                    reader.cancel()
        except aiohttp.WSServerHandshakeError as exc:
            raise ServerError(f"{self.base}: the websocket was refused ({exc.status})", exc.status) from None
        except aiohttp.ClientError as exc:
            raise ServerError(f"cannot reach {self.base}: {exc}") from None

    @staticmethod
    async def _follow(
        ws: aiohttp.ClientWebSocketResponse, on_message: Callable[[dict[str, Any]], None]
    ) -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                on_message(json.loads(msg.data))
