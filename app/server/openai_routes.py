"""The OpenAI-compatible route: `POST /v1/chat/completions`, plain or streamed (server-sent events).

Lives here: `OPENAI_ROUTES`. Imports aiohttp, `nodes.events` (NodeText), `app.server.*`.

A chat is a queued job carrying its `ChatSpec`: the run thread decodes it in the chat batch (`chat_engine`),
together with the other chats running then; its text streams back as `NodeText` events, as a graph's would. Errors here take
OpenAI's shape (`{"error": {message, type, param, code}}`), which its client libraries read.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import web

from app.server.chat_engine import chat_spec
from app.server.jobs import Job
from app.server.openai_chat import (
    GENERATE,
    ChatRefused,
    chat_workflow,
    chunk,
    completion,
    finish_chunk,
    openai_error,
)
from app.server.prompts import RequestRefused, native_workflow
from app.server.routes import BadRequest, read_json
from app.server.state import STATE
from nodes.events import NodeText


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    run = result.get("run") or {}
    return run.get("nodes", {}).get(GENERATE, {}).get("metrics", {})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    try:
        body = await read_json(request)
        workflow, resolved, settings = chat_workflow(body, state.library)
    except BadRequest as exc:
        return web.json_response(openai_error(str(exc)), status=exc.status)
    except ChatRefused as exc:
        return web.json_response(openai_error(str(exc), exc.param), status=400)
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    loop = asyncio.get_running_loop()
    try:
        wf = await loop.run_in_executor(
            None, native_workflow, workflow, state.registry, state.library, f"request {cid}", resolved
        )
    except RequestRefused as exc:
        return web.json_response(openai_error(str(exc)), status=400)
    job = Job(state.queue.next_number(False), cid, body, {}, [], wf, native=True)
    job.chat = chat_spec(wf, state.registry)  # decoded in the run thread's chat batch (chat_engine)
    done: asyncio.Future[dict[str, Any]] = loop.create_future()
    deltas: asyncio.Queue[str | None] = asyncio.Queue()
    stream = body.get("stream") is True

    def finished(result: dict[str, Any]) -> None:
        def settle() -> None:
            if not done.done():
                done.set_result(result)
            deltas.put_nowait(None)

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: the server is shutting down, nobody waits
            pass

    def on_event(event: Any) -> None:  # the run thread
        if isinstance(event, NodeText) and event.node_id == GENERATE and event.delta:
            try:
                loop.call_soon_threadsafe(deltas.put_nowait, event.delta)
            except RuntimeError:
                pass

    job.on_done = finished
    if stream:
        job.on_event = on_event
    state.queue.put(job)
    if not stream:
        result = await done
        if not result.get("ok"):
            message = result.get("error") or "the run failed"
            if result.get("refused"):  # e.g. a prompt longer than the model's context
                return web.json_response(openai_error(message), status=400)
            return web.json_response(openai_error(message, None, "server_error"), status=500)
        return web.json_response(
            completion(cid, settings, result["texts"].get(GENERATE, ""), _metrics(result))
        )

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(data: dict[str, Any] | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        await response.write(f"data: {text}\n\n".encode())

    try:
        await send(chunk(cid, settings, {"role": "assistant", "content": ""}))
        streamed = False
        while (delta := await deltas.get()) is not None:
            streamed = True
            await send(chunk(cid, settings, {"content": delta}))
        result = done.result()
        cached = result.get("texts", {}).get(GENERATE)
        if result.get("ok") and not streamed and cached:  # nothing streamed (an answer with no deltas)
            await send(chunk(cid, settings, {"content": cached}))
        if result.get("ok"):
            await send(finish_chunk(cid, settings, _metrics(result)))
        else:
            await send(openai_error(result.get("error") or "the run failed", None, "server_error"))
        await send("[DONE]")
        await response.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        job.cancel.cancel()  # the client went away: stop generating for nobody
        raise
    return response


# The routes as one immutable table, built from the handlers above (no module-level registry filled
# by decorators at import time).
OPENAI_ROUTES: tuple[web.RouteDef, ...] = (web.post("/v1/chat/completions", chat_completions),)
