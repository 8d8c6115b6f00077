"""Reading a ComfyUI workflow from a file: API JSON, UI JSON, or a PNG that ComfyUI saved.

Lives here: `ComfyFormatError`, `read_comfy_data`, `load_comfy_graph`, `import_comfy`, `import_comfy_data`,
`workflow_text`, `check_comfy`, `COMFY_PNG_KEYS`. Imports `nodes.comfy.*`, `nodes.registry`,
`nodes.workflow`, `nodes.workflow_json`.

ComfyUI's SaveImage writes two PNG text chunks: `prompt` (API format) and `workflow` (UI format). The UI
one is preferred (it has the layout, groups and titles); the API one is used when it is the only one.
A ComfyUI file goes through the same reader and limits as a Nodeloom file (size, depth, duplicate keys,
NaN/Infinity, numbers, lone surrogates; for a PNG the chunk limits of `nodes.png_text`), and what
`app import` writes is read back by that reader first, so `app check` never refuses it as unreadable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.comfy.api_format import ComfyFormatError, is_api_format, parse_api
from nodes.comfy.convert import ImportResult, convert_graph
from nodes.comfy.graph import ComfyGraph
from nodes.comfy.mapping import MapContext
from nodes.comfy.readable_ids import use_readable_ids
from nodes.comfy.ui_format import is_ui_format, parse_ui
from nodes.modes import is_wiring_problem, unneeded
from nodes.registry import NodeRegistry
from nodes.workflow import Problem, parse_workflow
from nodes.workflow_json import (
    MAX_FILE_BYTES,
    WorkflowFileError,
    check_json_value,
    decode_workflow_bytes,
    quote,
    read_document,
)

__all__ = [
    "COMFY_PNG_KEYS",
    "ComfyFormatError",
    "check_comfy",
    "import_comfy",
    "import_comfy_data",
    "load_comfy_graph",
    "read_comfy_data",
    "workflow_text",
]

COMFY_PNG_KEYS = ("workflow", "prompt")  # in order of preference
NO_COMFY_CHUNK = "this PNG has no ComfyUI 'workflow' or 'prompt' text chunk"


def read_comfy_data(path: Path) -> Any:
    """The workflow JSON in `path` (for a PNG: the UI workflow if present, else the API prompt)."""
    try:
        return read_document(Path(path), COMFY_PNG_KEYS, NO_COMFY_CHUNK).value
    except WorkflowFileError as exc:
        raise ComfyFormatError(f"{path}: {exc}") from None


def _dotted(keys: tuple[Any, ...]) -> str:
    return ".".join(str(k) if len(str(k)) <= 40 else f"{str(k)[:40]}…" for k in keys[:8])


def _located(data: Any, where: tuple[Any, ...]) -> str:
    """Where in a ComfyUI file a value is, by node id where there is one: "node '3', field 'text'"."""
    if is_api_format(data) and where:
        place = f"node {quote(where[0])}"
        if len(where) >= 3 and where[1] == "inputs":
            return f"{place}, field {quote(where[2])}" + (
                f" at {_dotted(where[3:])}" if len(where) > 3 else ""
            )
        return place + (f" at {_dotted(where[1:])}" if len(where) > 1 else "")
    if is_ui_format(data) and len(where) >= 2 and where[0] == "nodes" and isinstance(where[1], int):
        raw = data["nodes"][where[1]]
        node_id = raw.get("id") if isinstance(raw, dict) else None
        if node_id is not None:
            return f"node {quote(node_id)}" + (f" at {_dotted(where[2:])}" if len(where) > 2 else "")
    return f"at {_dotted(where)}" if where else "at the top level"


def load_comfy_graph(data: Any, source: str) -> ComfyGraph:
    """The ComfyUI graph of a file's JSON; `ComfyFormatError` naming `source` (and the node) when not one."""
    bad = check_json_value(data, limit=1)  # lone surrogates: text that could never be saved again
    if bad:
        (where, reason), *_ = bad
        raise ComfyFormatError(f"{source}: {_located(data, where)}: {reason}")
    try:
        if is_ui_format(data):
            return parse_ui(data)
        if is_api_format(data):
            return parse_api(data)
    except ComfyFormatError as exc:
        raise ComfyFormatError(f"{source}: {exc}") from None
    raise ComfyFormatError(
        f"{source}: not a ComfyUI workflow (neither UI format with 'nodes' and 'links' nor API format "
        "{id: {class_type, inputs}})"
    )


def import_comfy_data(
    data: Any,
    registry: NodeRegistry,
    source: str,
    *,
    title: str,
    detect_family: Callable[[str], str | None] | None = None,
) -> ImportResult:
    """A ComfyUI file's JSON (already read) -> the Nodeloom workflow and the report."""
    graph = load_comfy_graph(data, source)
    use_readable_ids(graph)  # ksampler, vae_decode, ...; ComfyUI's ids go to meta.comfyui.ids
    ctx = MapContext(graph, detect_family) if detect_family else MapContext(graph)
    result = convert_graph(graph, registry, ctx, title=title)
    result.notes = graph.all_notes()  # the kept notes, and how many were left out
    return result


def import_comfy(
    path: Path,
    registry: NodeRegistry,
    *,
    detect_family: Callable[[str], str | None] | None = None,
) -> ImportResult:
    path = Path(path)
    return import_comfy_data(
        read_comfy_data(path), registry, str(path), title=path.stem, detect_family=detect_family
    )


def workflow_text(workflow: dict[str, Any], source: str) -> str:
    """The imported workflow as the text `app import` writes; `ComfyFormatError` unless Nodeloom's own
    reader takes that text back (size, depth, numbers, valid Unicode), so `app check` can read the file."""
    bad = check_json_value(workflow, limit=1)
    if bad:
        (where, reason), *_ = bad
        raise ComfyFormatError(
            f"{source}: the imported workflow cannot be saved: {reason} (at {_dotted(where)})"
        )
    too_big = ComfyFormatError(
        f"{source}: the imported workflow would be larger than the {MAX_FILE_BYTES // 2**20} MiB a workflow "
        "file may be; refused"
    )
    parts: list[str] = []
    size = 0
    try:
        # Streamed, so an import that would write gigabytes stops at the limit instead of building them.
        for part in json.JSONEncoder(indent=2, ensure_ascii=False, allow_nan=False).iterencode(workflow):
            size += len(part)
            if size > MAX_FILE_BYTES:
                raise too_big
            parts.append(part)
    except ValueError as exc:  # allow_nan=False: a NaN or an infinity, which JSON cannot hold
        if exc is too_big:
            raise
        raise ComfyFormatError(f"{source}: the imported workflow holds a number JSON cannot: {exc}") from None
    text = "".join(parts) + "\n"
    try:
        decode_workflow_bytes(text.encode("utf-8"))
    except WorkflowFileError as exc:
        raise ComfyFormatError(f"{source}: the imported workflow would not read back: {exc}") from None
    return text


def check_comfy(result: ImportResult, registry: NodeRegistry, source: str) -> list[Problem]:
    """Every reason the imported workflow cannot run here: unsupported nodes first, then validation."""
    problems = [Problem(source, u.node, "type", f"{u.class_type}: {u.reason}") for u in result.unsupported]
    problems += [Problem(source, f.node, f.field, f.message) for f in result.families]
    unsupported_ids = {u.node for u in result.unsupported}
    wf, validation = parse_workflow(result.workflow, registry, source=source)
    # ComfyUI runs only what an output node needs, and so does a Run here (nodes.modes.prepare_run): the
    # wiring of a helper left dangling in a template (an unfed ImageScaleToTotalPixels) stops neither.
    skipped = set(unneeded(wf, registry))
    for problem in validation:
        # An unsupported node's own "unknown type" is already said, with its reason.
        if problem.node in unsupported_ids and problem.field == "type":
            continue
        if problem.node in skipped and is_wiring_problem(wf, registry, problem):
            continue
        problems.append(problem)
    return problems
