"""What `app import` tells at once about a ComfyUI import: mapped, approximated, unsupported, families that
do not run here (counted; `app import` lists them as problems), and every model file missing (with the folders searched and the command that adds one).

Lives here: `ADD_ROOT_HINT`, `is_approximated`, `summary_lines`. Imports `nodes.comfy.convert` (ImportResult) and
`nodes.workflow` (Problem). No Qt, no rich: plain lines the caller prints.
"""

from __future__ import annotations

from nodes.comfy.convert import ImportResult
from nodes.workflow import Problem

ADD_ROOT_HINT = (
    "add the folder that holds them: `app models add-root DIR` (or `--models-dir DIR` on this command)"
)
_APPROXIMATED = "approximated"


def is_approximated(message: str) -> bool:
    """A note that says what runs differently from ComfyUI (the summary lists and counts these)."""
    return message.startswith(_APPROXIMATED)


def _what_differs(message: str) -> str:
    return message.removeprefix(_APPROXIMATED).removeprefix(":").strip()


def summary_lines(result: ImportResult, name_problems: list[Problem], *, library_set: bool) -> list[str]:
    """One line per fact, most important last (the caller prints the verdict after them)."""
    meta = result.workflow.get("meta", {}).get("comfyui", {})
    classes: dict[str, str] = meta.get("classes", {})
    unsupported = {u.node for u in result.unsupported}
    mapped = [nid for nid in result.workflow.get("nodes", {}) if nid not in unsupported]
    approximated = [n for n in result.notes if n.node is not None and is_approximated(n.message)]
    lines = [
        f"summary: {len(mapped)} node(s) mapped ({len(approximated)} approximated), "
        f"{len(unsupported)} unsupported, {len(result.families)} model family problem(s); "
        f"{len(classes)} node(s) written"
    ]
    # The note says "approximated: ..." itself; the line names the node first, then what differs.
    lines += [
        f"approximated: node {n.node} ({n.class_type}): {_what_differs(n.message)}" for n in approximated
    ]
    missing = [p for p in name_problems if "not found" in p.reason or "does not exist" in p.reason]
    lines += [f"missing model: node {p.node}, field {p.field!r}: {p.reason}" for p in missing]
    if missing:
        lines.append(f"missing models: {ADD_ROOT_HINT}")
    elif not library_set:
        lines.append(f"model files not looked up: no models folder is set; {ADD_ROOT_HINT}")
    return lines
