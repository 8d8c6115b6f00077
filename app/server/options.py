"""What `app serve` was started with, and the rules on where it may listen.

Lives here: `ServeOptions`, `is_loopback`, `bind_problem`, `read_token_file`, `token_matches`, `MAX_BODY_BYTES`.
Imports the standard library, `memory.config`, `nodes.workflow_json` (the workflow reader's size limit),
`pipelines.models_library`.

Loopback by default. Any other address serves whoever can reach the port, so it needs a token: the server
refuses to start without one, and then every request (HTTP and the websocket) must carry it, as
`Authorization: Bearer TOKEN` or, for clients that cannot set headers on a websocket, `?token=TOKEN`.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from memory.config import MemoryConfig
from nodes.workflow_json import MAX_FILE_BYTES
from pipelines.models_library import ModelsLibrary

MAX_BODY_BYTES = MAX_FILE_BYTES  # the workflow reader's limit: a request is a workflow file sent over HTTP
MAX_UPLOAD_BYTES = MAX_FILE_BYTES  # a picture to condition on; ComfyUI's default is 100 MiB


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8188
    out_dir: Path = Path("outputs")
    input_dir: Path = Path("input")
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    library: ModelsLibrary = field(default_factory=ModelsLibrary)
    token: str | None = None
    allow_pickle: bool = False

    @property
    def temp_dir(self) -> Path:
        """Previews (ComfyUI's PreviewImage, `type: temp`): beside the outputs, out of the editor's history."""
        return self.out_dir / "temp"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost` only: a name that merely resolves there today may not tomorrow."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, token: str | None) -> str | None:
    """Why the server must not start on `host` with `token`, or None."""
    if token is not None and len(token) < 16:
        return "the auth token must be at least 16 characters (try `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
    if not is_loopback(host) and token is None:
        return (
            f"--host {host} is not a loopback address: anyone who can reach it could run workflows and read "
            "the outputs; give --auth-token TOKEN or --auth-token-file FILE (checked on every request), or "
            "serve on 127.0.0.1"
        )
    return None


def read_token_file(path: Path) -> str:
    """The token in `path` (its first line, stripped); ValueError naming the file when unreadable or empty."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--auth-token-file {path}: cannot read it ({exc})") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ValueError(f"--auth-token-file {path}: the file is empty")
    return token


def token_matches(expected: str, authorization: str | None, query_token: str | None) -> bool:
    """The request's token (Bearer header, or `?token=`) equals `expected`, compared in constant time."""
    given = None
    if authorization and authorization.startswith("Bearer "):
        given = authorization.removeprefix("Bearer ").strip()
    elif query_token:
        given = query_token
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
