"""The HTTP and websocket handlers: ComfyUI's endpoints and Nodeloom's `/run`.

Lives here: `ROUTES` (the handlers as aiohttp route definitions), `BadRequest`, `read_json`. Imports aiohttp, `nodes.workflow_json`
(the reader's limits), `app.server.*`.

Shapes follow ComfyUI's server.py: `POST /prompt` -> `{prompt_id, number, node_errors}`; `GET /queue` ->
`{queue_running, queue_pending}` of `[number, prompt_id, prompt, extra_data, outputs]` rows; `/history`
entries `{prompt, outputs, status, meta}`; `/upload/image` -> `{name, subfolder, type}`. Every refusal is
ComfyUI's error shape (`comfy_shapes.error_body`).
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
import uuid
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from app.server.comfy_shapes import error_body, node_info, object_info, problems_body
from app.server.files import FileRefused, folder_for, save_upload, view_path
from app.server.jobs import Job
from app.server.prompts import RequestRefused, comfy_prompt_workflow, native_workflow
from app.server.state import STATE, ServerState
from nodes.workflow_json import WorkflowFileError, decode_workflow_bytes

log = logging.getLogger("nodeloom.server")
_PROMPT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Served as a download, never rendered: a file in the output folder must not run script in a browser.
_NEVER_INLINE = {
    "text/html",
    "application/xhtml+xml",
    "text/javascript",
    "application/javascript",
    "text/css",
}


class BadRequest(Exception):
    """A request refused before any work: answered 400 (or `status`) in ComfyUI's error shape."""

    def __init__(self, message: str, kind: str = "invalid_prompt", status: int = 400) -> None:
        self.kind, self.status = kind, status
        super().__init__(message)


def _state(request: web.Request) -> ServerState:
    return request.app[STATE]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


async def read_json(request: web.Request, *, empty_ok: bool = False) -> Any:
    """The body as JSON, read with the workflow reader's limits (size, depth, duplicate keys, NaN).
    The content type is not required: ComfyUI's example client posts JSON without one."""
    raw = await request.read()  # over client_max_size: aiohttp raises 413, answered in the error shape
    if empty_ok and not raw.strip():
        return {}
    try:
        return decode_workflow_bytes(raw)
    except WorkflowFileError as exc:
        raise BadRequest(f"the request body: {exc}", "invalid_json") from None


def _refused(exc: RequestRefused) -> web.Response:
    return _json(problems_body(exc.problems, exc.classes, [], exc.unsupported), 400)


def _prompt_id(data: dict[str, Any]) -> str:
    given = data.get("prompt_id")
    if given is None:
        return str(uuid.uuid4())
    if not isinstance(given, str) or not _PROMPT_ID.match(given):
        raise BadRequest("prompt_id: 1 to 128 letters, digits or ._:- expected")
    return given


def _number(state: ServerState, data: dict[str, Any]) -> float:
    if "number" in data:
        value = data["number"]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRequest(f"number: a number expected, got {type(value).__name__}")
        return float(value)
    return state.queue.next_number(bool(data.get("front")))


def _client_id(data: dict[str, Any]) -> str | None:
    cid = data.get("client_id")
    if cid is not None and not isinstance(cid, str):
        raise BadRequest("client_id: a string expected")
    return cid


async def _queue_job(state: ServerState, data: dict[str, Any], *, native: bool) -> Job:
    """Import and check the graph (off the event loop: it may read model headers), then queue it."""
    prompt_id = _prompt_id(data)
    if state.queue.full():
        raise BadRequest(
            f"the queue is full ({state.queue.max_pending} runs waiting); try again later", "queue_full", 503
        )
    if state.queue.known(prompt_id):
        raise BadRequest(f"prompt_id {prompt_id!r} is already queued or in the history")
    number, client_id = _number(state, data), _client_id(data)
    extra = data.get("extra_data", {})
    if not isinstance(extra, dict):
        raise BadRequest("extra_data: an object expected")
    extra = dict(extra)
    if client_id is not None:
        extra["client_id"] = client_id
    loop = asyncio.get_running_loop()
    source = f"request {prompt_id}"
    if native:
        graph = data.get("workflow", data)
        wf = await loop.run_in_executor(None, native_workflow, graph, state.registry, state.library, source)
    else:
        graph = data["prompt"]
        wf, notes = await loop.run_in_executor(
            None, comfy_prompt_workflow, graph, state.registry, state.library, source
        )
        for note in notes:  # what the import changed (a prefix made plain...): the server log says it
            log.info("%s: %s", source, note)
    if state.queue.known(prompt_id):  # again: a request with the same id may have been queued meanwhile
        raise BadRequest(f"prompt_id {prompt_id!r} is already queued or in the history")
    assert state.worker is not None
    outputs = state.worker.executor.sinks(wf)
    return Job(number, prompt_id, graph, extra, outputs, wf, client_id=client_id, native=native)


async def post_prompt(request: web.Request) -> web.Response:
    state = _state(request)
    data = await read_json(request)
    if not isinstance(data, dict) or "prompt" not in data:
        return _json(error_body("no_prompt", "No prompt provided", "No prompt provided"), 400)
    try:
        job = await _queue_job(state, data, native=False)
    except RequestRefused as exc:
        return _refused(exc)
    if not job.outputs:  # as ComfyUI: a graph without a save or preview node would compute for nobody
        return _json(
            error_body("prompt_no_outputs", "Prompt has no outputs", "add a SaveImage or PreviewImage"), 400
        )
    state.queue.put(job)
    return _json({"prompt_id": job.prompt_id, "number": job.number, "node_errors": {}})


async def get_prompt(request: web.Request) -> web.Response:
    return _json(_state(request).queue_info())


async def post_run(request: web.Request) -> web.Response:
    """Nodeloom's own workflow format; the reply waits for the run and carries its report and memory."""
    state = _state(request)
    data = await read_json(request)
    if not isinstance(data, dict):
        raise BadRequest('expected {"workflow": {...}} or a Nodeloom workflow', "no_prompt")
    try:
        job = await _queue_job(state, data, native=True)
    except RequestRefused as exc:
        return _refused(exc)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[dict[str, Any]] = loop.create_future()

    def finished(result: dict[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))
        except RuntimeError:  # the loop is closed: the server is shutting down, nobody waits
            pass

    job.on_done = finished
    state.queue.put(job)
    # A run that failed is still an answer (`ok: false`, the error naming node and field), not a server error.
    return _json(await done)


async def get_queue(request: web.Request) -> web.Response:
    queue = _state(request).queue
    return _json(
        {
            "queue_running": [job.row() for job in queue.running_jobs()],  # a chat batch is several
            "queue_pending": [job.row() for job in queue.pending()],
        }
    )


def _dropped(jobs: list[Job]) -> None:
    for job in jobs:
        if job.on_done is not None:
            job.on_done(
                {
                    "ok": False,
                    "prompt_id": job.prompt_id,
                    "status": "deleted",
                    "error": "deleted from the queue",
                }
            )


def _ids(data: dict[str, Any], key: str) -> list[str]:
    ids = data.get(key)
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest(f"{key}: a list of prompt ids expected", "invalid_request")
    return ids


async def post_queue(request: web.Request) -> web.Response:
    queue = _state(request).queue
    data = await read_json(request)
    if not isinstance(data, dict):
        raise BadRequest('expected {"clear": true} or {"delete": [prompt ids]}', "invalid_request")
    if data.get("clear"):
        _dropped(queue.wipe())
    if "delete" in data:
        _dropped(queue.delete(_ids(data, "delete")))
    return web.Response(status=200)


async def post_interrupt(request: web.Request) -> web.Response:
    data = await read_json(request, empty_ok=True)
    prompt_id = data.get("prompt_id") if isinstance(data, dict) else None
    _state(request).queue.interrupt(prompt_id if isinstance(prompt_id, str) else None)
    return web.Response(status=200)


def _int_query(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{name}: an integer expected, got {raw[:40]!r}", "invalid_request") from None


async def get_history(request: web.Request) -> web.Response:
    queue = _state(request).queue
    return _json(queue.history_items(_int_query(request, "max_items"), _int_query(request, "offset") or 0))


async def get_history_item(request: web.Request) -> web.Response:
    prompt_id = request.match_info["prompt_id"]
    items = _state(request).queue.history_items()
    return _json({prompt_id: items[prompt_id]} if prompt_id in items else {})


async def post_history(request: web.Request) -> web.Response:
    queue = _state(request).queue
    data = await read_json(request)
    if not isinstance(data, dict):
        raise BadRequest('expected {"clear": true} or {"delete": [prompt ids]}', "invalid_request")
    if data.get("clear"):
        queue.history_delete(None)
    if "delete" in data:
        queue.history_delete(_ids(data, "delete"))
    return web.Response(status=200)


async def view(request: web.Request) -> web.StreamResponse:
    state = _state(request)
    query = request.query
    if "filename" not in query:
        raise BadRequest("filename is required", "invalid_request")
    try:
        _, folder = folder_for(query.get("type"), state.folders, "output")
        path = view_path(folder, query.get("subfolder", ""), query["filename"])
    except FileRefused as exc:
        raise BadRequest(str(exc), "invalid_request", exc.status) from None
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if content_type in _NEVER_INLINE:
        content_type = "application/octet-stream"
    headers = {"Content-Disposition": f'filename="{path.name}"', "Content-Type": content_type}
    return web.FileResponse(path, headers=headers)


async def upload_image(request: web.Request) -> web.Response:
    state = _state(request)
    if not request.content_type.startswith("multipart/"):
        raise BadRequest("expected a multipart form with an 'image' file", "invalid_request")
    try:
        post = await request.post()
    except (
        ValueError,
        HttpProcessingError,
    ) as exc:  # a part without a name, a bad part header, a broken boundary
        reason = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
        raise BadRequest(
            f"the multipart form: {str(reason).splitlines()[0][:200]}", "invalid_request"
        ) from None
    image = post.get("image")
    if not isinstance(image, web.FileField) or not image.filename:
        raise BadRequest("expected a multipart form with an 'image' file", "invalid_request")
    subfolder = str(post.get("subfolder", "") or "")
    overwrite = str(post.get("overwrite", "")).lower() in ("true", "1")
    try:
        kind, folder = folder_for(str(post.get("type", "") or "") or None, state.folders, "input")
        data = image.file.read()
        loop = asyncio.get_running_loop()
        name, subfolder = await loop.run_in_executor(
            None, save_upload, folder, subfolder, image.filename, data, overwrite
        )
    except FileRefused as exc:
        raise BadRequest(str(exc), "invalid_request", exc.status) from None
    return _json({"name": name, "subfolder": subfolder, "type": kind})


async def get_object_info(request: web.Request) -> web.Response:
    return _json(object_info(_state(request).registry))


async def get_object_info_node(request: web.Request) -> web.Response:
    spec = _state(request).registry.get(request.match_info["node_class"])
    return _json({spec.type: node_info(spec)} if spec is not None else {})


async def system_stats(request: web.Request) -> web.Response:
    worker = _state(request).worker
    memory = worker.memory if worker is not None else None
    device = str(memory.device) if memory is not None else "?"
    return _json(
        {
            "system": {"nodeloom": True, "comfyui_version": "nodeloom-compatible"},
            "devices": [{"name": device, "type": device.split(":")[0]}],
        }
    )


async def websocket(request: web.Request) -> web.WebSocketResponse:
    state = _state(request)
    ws = web.WebSocketResponse(max_msg_size=2**20)
    await ws.prepare(request)
    sid = request.query.get("clientId") or uuid.uuid4().hex
    previous = state.sockets.pop(sid, None)  # a reconnect under the same id replaces the old socket
    if previous is not None:
        await previous.close()
    state.sockets[sid] = ws
    try:
        await ws.send_json({"type": "status", "data": {"status": state.queue_info(), "sid": sid}})
        async for msg in ws:  # clients may send feature flags; nothing they send is acted on
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        if state.sockets.get(sid) is ws:
            del state.sockets[sid]
    return ws


# The routes as one immutable table, built from the handlers above (no module-level registry filled
# by decorators at import time).
ROUTES: tuple[web.RouteDef, ...] = (
    web.post("/prompt", post_prompt),
    web.get("/prompt", get_prompt),
    web.post("/run", post_run),
    web.get("/queue", get_queue),
    web.post("/queue", post_queue),
    web.post("/interrupt", post_interrupt),
    web.get("/history", get_history),
    web.get("/history/{prompt_id}", get_history_item),
    web.post("/history", post_history),
    web.get("/view", view),
    web.post("/upload/image", upload_image),
    web.get("/object_info", get_object_info),
    web.get("/object_info/{node_class}", get_object_info_node),
    web.get("/system_stats", system_stats),
    web.get("/ws", websocket),
)
