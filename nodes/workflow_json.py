"""Reading untrusted workflow JSON with explicit limits, and quoting user values in messages.

Lives here: `read_workflow_json`, `decode_workflow_bytes`, `check_json_value`, `WorkflowFileError` and the
limits (`MAX_FILE_BYTES`, `MAX_DEPTH`). Imports the standard library, `nodes.problems` (`Problem`,
`WorkflowError` and `quote`, which cuts a value quoted back in a message), and lazily `nodes.png` (it imports
torch: reading a PNG only) and `nodes.video_read` (a saved video's workflow).

A workflow file comes from anywhere (a download, a PNG someone posted), so every way it can be
malformed becomes one short sentence instead of a traceback: too big, not UTF-8, nested deeper than any
real workflow, a key given twice (JSON would silently keep the last), NaN/Infinity or numbers no
parameter can hold, and lone surrogates (text that cannot be saved as UTF-8 later). Values quoted
back in messages are cut by `quote`, so a 10 MiB string never becomes 10 MiB of stderr.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from nodes.problems import Problem, WorkflowError, quote

MAX_FILE_BYTES = 32 * 2**20  # a big real workflow is ~100 KB
MAX_DEPTH = 64  # a workflow needs ~6 levels; json and copy.deepcopy recurse, so cap well below 1000
MAX_INT = 2**64  # beyond any parameter (seeds are < 2**63) and beyond what other JSON readers keep exact

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class WorkflowFileError(ValueError):
    """The bytes of a workflow file cannot be read as one; the message says why (without the file name)."""


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _no_constants(name: str) -> Any:
    raise WorkflowFileError(f"{name} is not a JSON number (write a finite number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise WorkflowFileError(f"the number {quote(text)} is too large")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > 25:  # int() itself refuses >4300 digits; nothing useful is this long
        raise WorkflowFileError(f"the number {quote(text)} is too large")
    value = int(text)
    if abs(value) > MAX_INT:
        raise WorkflowFileError(f"the number {quote(text)} is too large")
    return value


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text, ignoring brackets inside strings (no recursion)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _decode_text(raw: bytes) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise WorkflowFileError("the file is UTF-16 text; workflow files are UTF-8 (save it as UTF-8)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if b"\x00" in raw[:64]:
            hint = " (UTF-16 or binary data?)"
        else:
            hint = " (Latin-1 or another legacy encoding? save it as UTF-8)"
        raise WorkflowFileError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}{hint}"
        ) from exc


def parse_json_text(text: str) -> Any:
    """`json.loads` with the limits above; raises `WorkflowFileError`."""
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise WorkflowFileError(f"the JSON is nested {depth:,} levels deep; at most {MAX_DEPTH} are allowed")
    try:
        return json.loads(
            text,
            object_pairs_hook=_pairs_without_duplicates,
            parse_constant=_no_constants,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except _DuplicateKey as exc:
        raise WorkflowFileError(
            f"the key {quote(exc.key)} appears twice in one object; JSON would silently keep only the "
            "last one, so the file is ambiguous (remove one of them)"
        ) from None
    except json.JSONDecodeError as exc:
        raise WorkflowFileError(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, WorkflowFileError):
            raise
        raise WorkflowFileError(f"not valid JSON: {str(exc)[:200]}") from None


def is_png(raw: bytes) -> bool:
    return raw.startswith(_PNG_MAGIC)


def decode_workflow_bytes(raw: bytes) -> Any:
    """A JSON workflow file's bytes -> its value; raises `WorkflowFileError`."""
    if len(raw) > MAX_FILE_BYTES:
        raise WorkflowFileError(
            f"the file is {len(raw) / 2**20:,.1f} MiB; a workflow file is at most {MAX_FILE_BYTES // 2**20} MiB"
        )
    if not raw.strip():
        raise WorkflowFileError("the file is empty")
    return parse_json_text(_decode_text(raw))


def check_json_value(data: Any, limit: int = 3) -> list[tuple[tuple[Any, ...], str]]:
    """Problems a parsed value can still have: depth and lone surrogates, as (key path, reason) pairs.

    Walks iteratively (no recursion), so it is safe on a value built in memory rather than read here.
    """
    found: list[tuple[tuple[Any, ...], str]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack and len(found) < limit:
        value, where = stack.pop()
        if len(where) > MAX_DEPTH:
            found.append((where[:4], f"nested more than {MAX_DEPTH} levels deep"))
            continue
        if isinstance(value, str):
            hit = _SURROGATE.search(value)
            if hit:
                found.append(
                    (
                        where,
                        f"text with a lone surrogate {hit.group()!r} at position {hit.start()} is not "
                        "valid Unicode and could not be saved",
                    )
                )
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _SURROGATE.search(key):
                    found.append((where, f"the key {quote(key)} contains a lone surrogate"))
                stack.append((item, (*where, key)))
        elif isinstance(value, list):
            stack.extend((item, (*where, i)) for i, item in enumerate(value))
    return found


def read_workflow_json(path: Path) -> Any:
    """The JSON of a workflow file, or of the workflow embedded in a Nodeloom PNG.

    What the file is comes from its content (a PNG renamed .json is read as a PNG); every way it can be
    unreadable raises `WorkflowError` naming the file."""
    from nodes.png import EmbeddedWorkflowError, read_embedded_workflow_text  # torch: only for a PNG
    from nodes.video_read import VideoFileError, read_video_workflow_text, video_container

    path = Path(path)

    def fail(reason: str) -> Exception:
        return WorkflowError([Problem(str(path), None, None, reason)])

    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise fail(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        if is_png(raw):
            text = read_embedded_workflow_text(path)
            if text is None:
                raise fail("this PNG has no embedded Nodeloom workflow")
            try:
                return parse_json_text(text)
            except WorkflowFileError as exc:
                raise fail(f"the PNG's embedded workflow is damaged: {exc}") from None
        if path.suffix.lower() == ".png":
            raise fail("not a PNG image (or a damaged one)")
        video = video_container(raw)  # a saved mp4/webm/webp: its own bounded reader
        if video is not None:
            text = read_video_workflow_text(path, video)
            if text is None:
                raise fail(f"this {video} has no embedded Nodeloom workflow")
            try:
                return parse_json_text(text)
            except WorkflowFileError as exc:
                raise fail(f"the {video}'s embedded workflow is damaged: {exc}") from None
        if path.suffix.lower() in (".mp4", ".webm", ".webp"):
            raise fail("not a video (or a damaged one)")
        return decode_workflow_bytes(raw)
    except (WorkflowFileError, EmbeddedWorkflowError, VideoFileError) as exc:
        raise fail(str(exc)) from None
