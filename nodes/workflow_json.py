"""Reading untrusted workflow JSON with explicit limits, and quoting user values in messages.

Lives here: `read_workflow_json`, `read_document` (a JSON file or a PNG's chunk, any tool's), `Document`,
`decode_workflow_bytes`, `parse_json_text`, `check_json_value`, `too_big`, `WorkflowFileError` and the limits
(`MAX_FILE_BYTES`, `MAX_DEPTH`, `MAX_VALUES`). Imports the standard library, `nodes.png_text` (stdlib only),
`nodes.problems` (`Problem`, `WorkflowError` and `quote`, which cuts a value quoted back in a message), and
lazily `nodes.video_read` (a saved video's workflow, with its own bounded reader).

A workflow file comes from anywhere (a download, a PNG someone posted), so every way it can be
malformed becomes one short sentence instead of a traceback: too big, not UTF-8, nested deeper than any
real workflow, a key given twice (JSON would silently keep the last), NaN/Infinity or numbers no
parameter can hold, and lone surrogates (text that cannot be saved as UTF-8 later). Values quoted
back in messages are cut by `quote`, so a 10 MiB string never becomes 10 MiB of stderr.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from nodes.png_text import NODELOOM_KEY, PNG_MAGIC, PngTextError, is_png, read_png_texts
from nodes.problems import Problem, WorkflowError, quote

MAX_FILE_BYTES = 32 * 2**20  # a big real workflow is ~100 KB
MAX_DEPTH = 64  # a workflow needs ~6 levels; json and copy.deepcopy recurse, so cap well below 1000
# Every value is a Python object and every later pass (validation, saving) visits each one: 30 MB of
# "1.5," would be 8 million floats, ~300 MB and a minute of work. The biggest shipped or test workflow
# has ~800 values; a big real one a few thousand.
MAX_VALUES = 1_000_000
MAX_INT = 2**64  # beyond any parameter (seeds are < 2**63) and beyond what other JSON readers keep exact

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")


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


def json_shape(text: str) -> tuple[int, int]:
    """(the deepest bracket nesting, about how many values) of a JSON text, ignoring what is inside
    strings; no recursion, and no Python object per value (so it is cheap before parsing)."""
    bare = _STRING.sub("", text)
    brackets = _NOT_BRACKET.sub("", bare)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0), bare.count(",") + 1


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
    depth, values = json_shape(text)
    if depth > MAX_DEPTH:
        raise WorkflowFileError(f"the JSON is nested {depth:,} levels deep; at most {MAX_DEPTH} are allowed")
    if values > MAX_VALUES:
        raise WorkflowFileError(
            f"the JSON holds about {values:,} values; at most {MAX_VALUES:,} are allowed (a big workflow "
            "holds a few thousand)"
        )
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


def too_big(size: int) -> str:
    """Why a file of `size` bytes (0 when unknown: a pipe) is refused; never a size it does not have."""
    limit = f"{MAX_FILE_BYTES // 2**20} MiB"
    if size > MAX_FILE_BYTES:
        return f"the file is {size / 2**20:,.1f} MiB; a workflow file is at most {limit}"
    return f"the file is larger than the {limit} limit for a workflow file"


def decode_workflow_bytes(raw: bytes, size: int | None = None) -> Any:
    """A JSON workflow file's bytes -> its value; raises `WorkflowFileError`. `size` is the file's size
    when `raw` is only its first `MAX_FILE_BYTES + 1` bytes."""
    if len(raw) > MAX_FILE_BYTES:
        raise WorkflowFileError(too_big(len(raw) if size is None else size))
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
        # As the reader counts: a container inside k others is at depth k + 1, a scalar at depth k.
        if len(where) + isinstance(value, dict | list) > MAX_DEPTH:
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


@dataclass(frozen=True)
class Document:
    """A workflow file read and parsed: the JSON value, and the PNG text chunk it came from (None for a
    JSON file)."""

    value: Any
    png_key: str | None = None


def _open_error(exc: OSError) -> WorkflowFileError:
    return WorkflowFileError(f"cannot read the file: {exc.strerror or exc}")


def _video_document(path: Path, head: bytes) -> Document | None:
    """The Nodeloom workflow a saved mp4/webm/webp carries (read by its own bounded reader), None when the
    file is no video; a file named as a video that is none is refused rather than parsed as JSON."""
    from nodes.video_read import VideoFileError, read_video_workflow_text, video_container

    video = video_container(head)
    if video is None:
        if path.suffix.lower() in (".mp4", ".webm", ".webp"):
            raise WorkflowFileError("not a video (or a damaged one)")
        return None
    try:
        text = read_video_workflow_text(path, video)
    except VideoFileError as exc:
        raise WorkflowFileError(str(exc)) from None
    if text is None:
        raise WorkflowFileError(f"this {video} has no embedded Nodeloom workflow")
    try:
        return Document(parse_json_text(text), NODELOOM_KEY)
    except WorkflowFileError as exc:
        raise WorkflowFileError(f"the {video}'s embedded workflow is damaged: {exc}") from None


def read_document(path: Path, png_keys: Sequence[str], missing: str) -> Document:
    """The JSON of a workflow file, or of the first of `png_keys` a PNG carries; what the file is comes
        from its content (a PNG renamed .json is read as a PNG). Every limit applies to both: size, depth,
        duplicate keys, numbers; a PNG's chunks also have `nodes.png_text`'s (decompression, declared size), and a
    saved video's workflow is read by `nodes.video_read` under the same size cap.

        Raises `WorkflowFileError` (without the file name); `missing` is the reason when a PNG carries none
        of `png_keys`."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(len(PNG_MAGIC))
            if is_png(head):
                f.seek(0)
                texts = read_png_texts(f, png_keys, MAX_FILE_BYTES)
            else:
                texts = None
                raw = head + f.read(MAX_FILE_BYTES + 1 - len(head))
                size = os.fstat(f.fileno()).st_size if len(raw) > MAX_FILE_BYTES else len(raw)
    except OSError as exc:
        raise _open_error(exc) from None
    except PngTextError as exc:
        raise WorkflowFileError(str(exc)) from None
    if texts is None:
        if Path(path).suffix.lower() == ".png":
            raise WorkflowFileError("not a PNG image (or a damaged one)")
        video = _video_document(Path(path), raw)
        if video is not None:
            return video
        return Document(decode_workflow_bytes(raw, size))
    for key in png_keys:
        text = texts.get(key, "")
        if not text.strip():  # an empty chunk carries nothing
            continue
        try:
            return Document(parse_json_text(text), key)
        except WorkflowFileError as exc:
            label = "embedded workflow" if key == NODELOOM_KEY else f"{key!r} text chunk"
            raise WorkflowFileError(f"the PNG's {label} is damaged: {exc}") from None
    raise WorkflowFileError(missing)


def read_workflow_json(path: Path) -> Any:
    """The JSON of a workflow file, or of the workflow embedded in a Nodeloom PNG or saved video.

    What the file is comes from its content (a PNG renamed .json is read as a PNG); every way it can be
    unreadable raises `WorkflowError` naming the file."""
    try:
        return read_document(path, (NODELOOM_KEY,), "this PNG has no embedded Nodeloom workflow").value
    except WorkflowFileError as exc:
        raise WorkflowError([Problem(str(path), None, None, str(exc))]) from None
