"""Reading a ComfyUI workflow from a file: API JSON, UI JSON, or a PNG that ComfyUI saved.

Lives here: `ComfyFormatError`, `read_comfy_data`, `load_comfy_graph`, `import_comfy`, `check_comfy`.
Imports `nodes.comfy.*`, `nodes.registry`, `nodes.workflow`, PIL.

ComfyUI's SaveImage writes two PNG text chunks: `prompt` (API format) and `workflow` (UI format). The UI
one is preferred (it has the layout, groups and titles); the API one is used when it is the only one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from nodes.comfy.api_format import ComfyFormatError, is_api_format, parse_api
from nodes.comfy.convert import ImportResult, convert_graph
from nodes.comfy.graph import ComfyGraph
from nodes.comfy.mapping import MapContext
from nodes.comfy.ui_format import is_ui_format, parse_ui
from nodes.registry import NodeRegistry
from nodes.workflow import Problem, parse_workflow

__all__ = ["ComfyFormatError", "check_comfy", "import_comfy", "load_comfy_graph", "read_comfy_data"]


def _png_chunks(path: Path) -> dict[str, Any]:
    try:
        with Image.open(path) as image:
            info = dict(image.info)
    except (UnidentifiedImageError, OSError) as exc:
        raise ComfyFormatError(f"{path}: not a readable PNG ({exc})") from exc
    found: dict[str, Any] = {}
    for key in ("workflow", "prompt"):
        text = info.get(key)
        if isinstance(text, str) and text.strip():
            try:
                found[key] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ComfyFormatError(
                    f"{path}: the PNG's {key!r} chunk is not valid JSON ({exc.msg})"
                ) from exc
    if not found:
        raise ComfyFormatError(f"{path}: this PNG has no ComfyUI 'workflow' or 'prompt' text chunk")
    return found


def read_comfy_data(path: Path) -> Any:
    """The workflow JSON in `path` (for a PNG: the UI workflow if present, else the API prompt)."""
    path = Path(path)
    if path.suffix.lower() == ".png":
        chunks = _png_chunks(path)
        return chunks.get("workflow", chunks.get("prompt"))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ComfyFormatError(
            f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ComfyFormatError(f"{path}: cannot read the file ({exc})") from exc


def load_comfy_graph(data: Any, source: str) -> ComfyGraph:
    if is_ui_format(data):
        return parse_ui(data)
    if is_api_format(data):
        return parse_api(data)
    raise ComfyFormatError(
        f"{source}: not a ComfyUI workflow (neither UI format with 'nodes' and 'links' nor API format "
        "{id: {class_type, inputs}})"
    )


def import_comfy(
    path: Path,
    registry: NodeRegistry,
    *,
    detect_family: Callable[[str], str | None] | None = None,
) -> ImportResult:
    path = Path(path)
    graph = load_comfy_graph(read_comfy_data(path), str(path))
    ctx = MapContext(graph, detect_family) if detect_family else MapContext(graph)
    return convert_graph(graph, registry, ctx, title=path.stem)


def check_comfy(result: ImportResult, registry: NodeRegistry, source: str) -> list[Problem]:
    """Every reason the imported workflow cannot run here: unsupported nodes first, then validation."""
    problems = [Problem(source, u.node, "type", f"{u.class_type}: {u.reason}") for u in result.unsupported]
    unsupported_ids = {u.node for u in result.unsupported}
    _, validation = parse_workflow(result.workflow, registry, source=source)
    for problem in validation:
        # An unsupported node's own "unknown type" is already said, with its reason.
        if problem.node in unsupported_ids and problem.field == "type":
            continue
        problems.append(problem)
    return problems
