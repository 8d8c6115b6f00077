"""ComfyUI's JSON shapes, built from Nodeloom's values: errors, image references, history entries and
`/object_info`.

Lives here: `error_body`, `problems_body`, `image_ref`, `history_entry`, `object_info`, `node_info`.
Imports `nodes.problems`, `nodes.registry`, `nodes.spec`, `nodes.comfy.convert` (COMFY_META_KEY).

A bad request gets ComfyUI's error shape `{"error": {type, message, details, extra_info}, "node_errors":
{node: {errors: [...], dependent_outputs, class_type}}}`: clients that show ComfyUI's errors show ours.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from nodes.comfy.convert import COMFY_META_KEY
from nodes.problems import Problem
from nodes.registry import NodeRegistry
from nodes.spec import NodeSpec, Param
from nodes.workflow import Workflow

MAX_SEED = 2**64 - 1  # ComfyUI's seed widget range: 0 .. 0xffffffffffffffff


def error_body(
    kind: str, message: str, details: str = "", node_errors: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "error": {"type": kind, "message": message, "details": details, "extra_info": {}},
        "node_errors": node_errors or {},
    }


def comfy_class(wf: Workflow | None, node_id: str, fallback: str = "") -> str:
    """The ComfyUI class a node was imported from (what the client sent), else our type."""
    meta = wf.meta.get(COMFY_META_KEY) if wf is not None else None
    classes = meta.get("classes") if isinstance(meta, dict) else None
    if isinstance(classes, dict) and isinstance(classes.get(node_id), str):
        return classes[node_id]
    node = wf.nodes.get(node_id) if wf is not None else None
    return node.type if node is not None else fallback


def problems_body(
    problems: list[Problem], classes: dict[str, str], outputs: list[str], unsupported: set[str]
) -> dict[str, Any]:
    """A refused graph: ComfyUI's `invalid_prompt` when a node type does not exist here, else
    `prompt_outputs_failed_validation`, with every problem under its node in `node_errors`."""
    node_errors: dict[str, Any] = {}
    general: list[str] = []
    for p in problems:
        if p.node is None:
            general.append(p.reason)
            continue
        entry = node_errors.setdefault(
            p.node, {"errors": [], "dependent_outputs": list(outputs), "class_type": classes.get(p.node, "")}
        )
        kind = "invalid_prompt" if p.node in unsupported and p.field == "type" else "value_not_valid"
        entry["errors"].append(
            {
                "type": kind,
                "message": p.reason,
                "details": f"{p.field}: {p.reason}" if p.field else p.reason,
                "extra_info": {"input_name": p.field} if p.field else {},
            }
        )
    if unsupported:
        first = sorted(unsupported)[0]
        message = f"Cannot execute because node {classes.get(first, first)} does not exist here."
        return error_body("invalid_prompt", message, f"Node ID '#{first}'", node_errors)
    if general and not node_errors:
        return error_body("invalid_prompt", general[0], "; ".join(general[1:]))
    details = "; ".join(general + [str(p) for p in problems if p.node is not None])
    return error_body(
        "prompt_outputs_failed_validation", "Prompt outputs failed validation", details, node_errors
    )


def image_ref(path: str | Path, root: Path, kind: str) -> dict[str, str] | None:
    """`{filename, subfolder, type}` for a file under `root`, or None when it lies elsewhere."""
    try:
        relative = Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        return None
    parent = relative.parent.as_posix()
    return {"filename": relative.name, "subfolder": "" if parent == "." else parent, "type": kind}


def history_entry(
    row: list[Any],
    outputs: dict[str, dict[str, Any]],
    status: str,
    messages: list[list[Any]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """One `/history` entry: `{prompt, outputs, status: {status_str, completed, messages}, meta}`."""
    return {
        "prompt": row,
        "outputs": outputs,
        "status": {"status_str": status, "completed": status == "success", "messages": messages},
        "meta": meta,
    }


def now_ms() -> int:
    """ComfyUI's message timestamps: milliseconds since the epoch."""
    return int(time.time() * 1000)


def _param_input(param: Param) -> list[Any]:
    kind = param.kind.name
    opts: dict[str, Any] = {}
    if param.default is not None:
        opts["default"] = param.default
    if param.help:
        opts["tooltip"] = param.help
    if param.choices:
        return [list(param.choices), opts]
    if kind in ("int", "seed", "float"):
        for name in ("min", "max", "step"):
            value = getattr(param, name)
            if value is not None:
                opts[name] = int(value) if kind != "float" and float(value).is_integer() else value
        if kind == "seed":
            opts.setdefault("min", 0)
            opts.setdefault("max", MAX_SEED)
            opts["control_after_generate"] = True
        return ["FLOAT" if kind == "float" else "INT", opts]
    if kind == "bool":
        return ["BOOLEAN", opts]
    if kind == "text":
        opts["multiline"] = True
    return ["STRING", opts]


def node_info(spec: NodeSpec) -> dict[str, Any]:
    """One node type in `/object_info`'s shape (ComfyUI's `node_info`)."""
    required: dict[str, Any] = {}
    optional: dict[str, Any] = {}
    for port in spec.inputs:
        (optional if port.optional else required)[port.name] = [port.type.name, {"tooltip": port.help}]
    for param in spec.params:
        (optional if param.optional else required)[param.name] = _param_input(param)
    inputs: dict[str, Any] = {"required": required}
    if optional:
        inputs["optional"] = optional
    return {
        "input": inputs,
        "input_order": {key: list(value) for key, value in inputs.items()},
        "output": [o.type.name for o in spec.outputs],
        "output_is_list": [False for _ in spec.outputs],
        "output_name": [o.name for o in spec.outputs],
        "name": spec.type,
        "display_name": spec.title,
        "description": spec.description,
        "python_module": "nodeloom",
        "category": spec.category,
        "output_node": spec.is_output,
    }


def object_info(registry: NodeRegistry) -> dict[str, Any]:
    return {spec.type: node_info(spec) for spec in registry}
