"""`app serve`: the aiohttp application, its middlewares, and the command that starts it.

Lives here: `build_app`, `start_site`, `serve_command`, `build_serve_parser`, `options_from_args`. Imports
aiohttp, `app.cli` (`memory_config`), `app.memory_args`, `app.comfy_commands` (`library_from`,
`add_models_dir_argument`), `app.server.*`.

    app serve [--host 127.0.0.1] [--port 8188] [--out outputs] [--input-dir input] [--models-dir DIR]
              [--device/--offload/--vram-budget/--ram-budget as --run] [--auth-token T | --auth-token-file F]

Middlewares, outermost first: errors (any refusal or bug -> ComfyUI's error shape, never a traceback),
token (every request and the websocket, when one is set), origin (a browser page from another site may
not post to this server: ComfyUI's host/origin check). Bodies are bounded by `MAX_BODY_BYTES`. Every
route also answers under `/api` as ComfyUI's does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from app.comfy_commands import add_models_dir_argument, library_from
from app.exit_codes import EXIT_INVALID, EXIT_OK
from app.memory_args import add_memory_arguments
from app.server.comfy_shapes import error_body
from app.server.jobs import JobQueue
from app.server.openai_routes import OPENAI_ROUTES
from app.server.options import MAX_BODY_BYTES, ServeOptions, bind_problem, read_token_file, token_matches
from app.server.routes import ROUTES, BadRequest
from app.server.state import STATE, ServerState
from app.server.worker import RunWorker
from nodes.registry import NodeRegistry

log = logging.getLogger("nodeloom.server")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_STATUS_KIND = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
}


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return web.json_response(error_body(exc.kind, str(exc)), status=exc.status)
    except web.HTTPRequestEntityTooLarge:
        message = f"the request body is over {MAX_BODY_BYTES // 2**20} MiB, the most a workflow may be"
        return web.json_response(error_body("too_large", message), status=413)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = _STATUS_KIND.get(exc.status, "invalid_request")
        return web.json_response(error_body(kind, exc.reason or kind), status=exc.status)
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:  # a bug: logged with its traceback here, one line to the client
        log.exception("%s %s failed", request.method, request.path)
        return web.json_response(
            error_body("server_error", "internal error while handling the request (see the server log)"),
            status=500,
        )


def _token_middleware(token: str) -> Any:
    @web.middleware
    async def token_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token_matches(token, request.headers.get("Authorization"), request.query.get("token")):
            return web.json_response(
                error_body("unauthorized", "this server needs its token: Authorization: Bearer TOKEN"),
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await handler(request)

    return token_middleware


@web.middleware
async def origin_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page on another site can make the browser post here (127.0.0.1 included): when a request says
    where it comes from (Origin) and that is not this server's own host, refuse it."""
    origin, host = request.headers.get("Origin"), request.headers.get("Host")
    if origin and host and origin != "null":
        if urlsplit(origin).netloc.lower() != host.lower():
            return web.json_response(
                error_body("forbidden", f"requests from the page at {origin[:100]} are not accepted"),
                status=403,
            )
    return await handler(request)


def build_app(
    options: ServeOptions, registry: NodeRegistry, worker: RunWorker | None = None
) -> web.Application:
    """The application; `worker` (built by the caller, who checked the memory settings) or one built at
    startup."""
    middlewares: list[Any] = [errors_middleware]
    if options.token is not None:
        middlewares.append(_token_middleware(options.token))
    middlewares.append(origin_middleware)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    state = ServerState(options, registry, worker)
    app[STATE] = state
    app.on_startup.append(state.start)
    app.on_shutdown.append(state.stop)
    app.add_routes(ROUTES)
    app.add_routes([web.route(r.method, "/api" + r.path, r.handler) for r in ROUTES])
    app.add_routes(OPENAI_ROUTES)
    return app


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving `app`; returns the runner (for `cleanup()`) and the port (0 picks a free one)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = next((a[1] for a in runner.addresses if isinstance(a, tuple)), port)
    return runner, int(bound)


def build_serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="app serve", description="Serve runs over HTTP and a websocket (ComfyUI-compatible endpoints)."
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)"
    )
    p.add_argument("--port", type=int, default=8188, help="port (default 8188, ComfyUI's)")
    p.add_argument("--out", type=Path, default=Path("outputs"), help="output folder (default ./outputs)")
    p.add_argument(
        "--input-dir", type=Path, default=Path("input"), help="where /upload/image writes (default ./input)"
    )
    add_memory_arguments(p)
    add_models_dir_argument(p)
    p.add_argument(
        "--auth-token", help="token every request must carry (needed off loopback; >= 16 characters)"
    )
    p.add_argument("--auth-token-file", type=Path, help="read the token from this file's first line")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow pickle checkpoints found in the models folders (they can run code)",
    )
    return p


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """Raises ValueError naming the option at fault."""
    from app.cli import memory_config

    token = args.auth_token
    if args.auth_token_file is not None:
        if token is not None:
            raise ValueError("give --auth-token or --auth-token-file, not both")
        token = read_token_file(args.auth_token_file)
    problem = bind_problem(args.host, token)
    if problem is not None:
        raise ValueError(problem)
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: expected 0..65535")
    return ServeOptions(
        host=args.host,
        port=args.port,
        out_dir=args.out.resolve(),
        input_dir=args.input_dir.resolve(),
        memory=memory_config(args),
        library=library_from(args.models_dir),
        token=token,
        allow_pickle=args.allow_pickle,
    )


async def _serve(app: web.Application, options: ServeOptions) -> None:
    runner, port = await start_site(app, options.host, options.port)
    host = f"[{options.host}]" if ":" in options.host else options.host
    print(f"serving on http://{host}:{port} (outputs in {options.out_dir}); Ctrl+C stops", file=sys.stderr)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def serve_command(argv: list[str], registry_factory: Callable[[], NodeRegistry]) -> int:
    try:
        args = build_serve_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    try:
        options = options_from_args(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.threads is not None:
        if args.threads < 1:
            print("error: --threads must be at least 1", file=sys.stderr)
            return EXIT_INVALID
        import torch

        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    registry = registry_factory()
    try:  # before listening: a bad --device or budget is said in one line, and nothing is served
        worker = RunWorker(options, registry, JobQueue(), lambda kind, data, sid: None)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for note in worker.memory.ignored_settings():
        print(f"warning: {note}", file=sys.stderr)
    app = build_app(options, registry, worker)
    try:
        asyncio.run(_serve(app, options))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken, the address is not this machine's
        worker.stop()
        print(
            f"error: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}", file=sys.stderr
        )
        return EXIT_INVALID
    return EXIT_OK
