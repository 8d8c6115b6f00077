"""What the handlers share: options, registry, queue, run thread and the connected websockets.

Lives here: `ServerState`, `STATE`. Imports aiohttp, `app.server.jobs`, `app.server.worker`, `app.server.options`,
`app.server.prompts`.

Messages from the run thread reach the event loop through `send` (thread-safe: `call_soon_threadsafe` into
an asyncio queue); one publisher task writes them to the sockets, to one client (`client_id`) or to all.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from app.server.jobs import JobQueue
from app.server.options import ServeOptions
from app.server.prompts import ServerLibrary
from app.server.worker import RunWorker
from nodes.registry import NodeRegistry

log = logging.getLogger("nodeloom.server")


class ServerState:
    def __init__(
        self, options: ServeOptions, registry: NodeRegistry, worker: RunWorker | None = None
    ) -> None:
        self.options = options
        self.registry = registry
        self.library = ServerLibrary(options.library.roots, options.input_dir)
        self.queue = worker.queue if worker is not None else JobQueue()
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.outbox: asyncio.Queue[tuple[str, dict[str, Any], str | None]] | None = None
        self.worker: RunWorker | None = worker
        if worker is not None:
            worker.send = self.send
        self._publisher: asyncio.Task[None] | None = None
        self.queue.listeners.append(self.status_changed)

    @property
    def folders(self) -> dict[str, Any]:
        o = self.options
        return {"output": o.out_dir, "input": o.input_dir, "temp": o.temp_dir}

    def queue_info(self) -> dict[str, Any]:
        return {"exec_info": {"queue_remaining": self.queue.remaining()}}

    def status_changed(self) -> None:
        self.send("status", {"status": self.queue_info()}, None)

    def send(self, kind: str, data: dict[str, Any], sid: str | None) -> None:
        """From any thread: queue a message for client `sid` (None: every client)."""
        loop, outbox = self.loop, self.outbox
        if loop is None or outbox is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(outbox.put_nowait, (kind, data, sid))
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    async def _publish(self) -> None:
        assert self.outbox is not None
        while True:
            kind, data, sid = await self.outbox.get()
            if sid is None:
                targets = list(self.sockets.values())
            else:
                targets = [self.sockets[sid]] if sid in self.sockets else []
            for ws in targets:
                try:
                    await ws.send_json({"type": kind, "data": data})
                except (ConnectionError, RuntimeError) as exc:  # a client gone mid-send
                    log.debug("websocket send failed: %s", exc)

    async def start(self, app: web.Application) -> None:
        self.loop = asyncio.get_running_loop()
        self.outbox = asyncio.Queue()
        self._publisher = asyncio.create_task(self._publish())
        for folder in self.folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        if self.worker is None:  # built here, not at import: the memory manager reads the device when made
            self.worker = await self.loop.run_in_executor(
                None, RunWorker, self.options, self.registry, self.queue, self.send
            )
        self.worker.start()

    async def stop(self, app: web.Application) -> None:
        for ws in list(self.sockets.values()):
            await ws.close()
        if self.worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)
        if self._publisher is not None:
            self._publisher.cancel()


STATE: web.AppKey[ServerState] = web.AppKey("nodeloom_state", ServerState)
