"""Subgraph blueprints: a subgraph saved on its own, to reuse in any graph (ComfyUI's "Save as blueprint").

Lives here: `BLUEPRINT_KEY`, `used_definitions`, `blueprint_title`, `blueprint_document`, `blueprint_file_name`,
`merge_definitions`, `read_blueprint`, `blueprint_entries`, `insert_blueprint`.
Imports `nodes.subgraph`, `nodes.subgraph_spec`, `nodes.workflow`, `nodes.workflow_json`. No Qt; the folder
is chosen by the caller (the editor: `<user data dir>/blueprints`).

A blueprint file is an ordinary workflow file (it opens like one) holding one instance, its definition and
every definition nested in it, with `meta.blueprint` set. Inserting it merges those definitions into the
graph (one already there with the same content is shared, a different one under the same id is renamed) and
adds an instance with the saved promoted values.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from nodes.subgraph import _unique
from nodes.subgraph_spec import definition_problems
from nodes.workflow import FORMAT, VERSION, NodeInstance, Workflow

BLUEPRINT_KEY = "blueprint"


def used_definitions(subgraphs: dict[str, Any], def_id: str) -> list[str]:
    """`def_id` and every definition its inner graph uses, nested ones too."""
    out, todo = [], [def_id]
    while todo:
        d = todo.pop()
        if d in out or d not in subgraphs:
            continue
        out.append(d)
        todo.extend(raw.get("type") for raw in subgraphs[d].get("nodes", {}).values())
    return out


def blueprint_title(wf: Workflow, instance_id: str) -> str:
    d = wf.subgraphs.get(wf.nodes[instance_id].type, {})
    return str(wf.ui.get("nodes", {}).get(instance_id, {}).get("title") or d.get("title") or instance_id)


def blueprint_document(wf: Workflow, instance_id: str, title: str | None = None) -> dict[str, Any]:
    """The blueprint file for the instance `instance_id` of `wf` (its definition, nested ones, its values),
    called `title` (else the instance's title); its instances are called that too."""
    node = wf.nodes[instance_id]
    if node.type not in wf.subgraphs:
        raise ValueError(f"{instance_id!r} is not a subgraph instance")
    title = title or blueprint_title(wf, instance_id)
    slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "subgraph"
    return {
        "format": FORMAT,
        "version": VERSION,
        "meta": {"title": title, BLUEPRINT_KEY: True},
        "nodes": {slug: {"type": node.type, "params": copy.deepcopy(node.params), "inputs": {}}},
        "ui": {"nodes": {slug: {"pos": [0.0, 0.0]}}},
        "subgraphs": {
            k: copy.deepcopy(wf.subgraphs[k]) | ({"title": title} if k == node.type else {})
            for k in used_definitions(wf.subgraphs, node.type)
        },
    }


def read_blueprint(path: Path) -> dict[str, Any]:
    """A blueprint file's document; ValueError with a one-line reason naming the file when it is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable blueprint ({exc})") from exc
    subgraphs = doc.get("subgraphs") if isinstance(doc, dict) else None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(subgraphs, dict) or not isinstance(nodes, dict) or len(nodes) != 1:
        raise ValueError(f"{path}: a blueprint holds one subgraph node and its definitions")
    (raw,) = nodes.values()
    if not isinstance(raw, dict) or raw.get("type") not in subgraphs:
        raise ValueError(f"{path}: its node is not an instance of a subgraph it defines")
    problems = [p for k, v in subgraphs.items() for p in definition_problems(str(path), k, v)]
    if problems:
        raise ValueError(str(problems[0]))
    return doc


def blueprint_entries(folder: Path) -> list[tuple[str, Path]]:
    """(title, file) for every readable blueprint in `folder`, by title."""
    out = []
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
        try:
            doc = read_blueprint(path)
        except ValueError:
            continue  # a stray or damaged file is not listed; inserting it would say why
        out.append((str(doc.get("meta", {}).get("title") or path.stem), path))
    return sorted(out, key=lambda e: e[0].lower())


def blueprint_file_name(title: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_-]+", "_", title).strip("_") or "subgraph") + ".json"


def merge_definitions(
    existing: dict[str, Any],
    incoming: dict[str, Any],
    taken: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[dict[str, Any], dict[str, str]]:
    """`existing` definitions plus `incoming` ones (a new dict; neither is changed): one already there with the
    same content is shared, a different one under a used id (or one in `taken`) is renamed. Returns (merged,
    incoming id -> id in merged)."""
    merged = dict(existing)
    incoming = copy.deepcopy(incoming)
    order: list[str] = []
    for def_id in incoming:
        order += [k for k in used_definitions(incoming, def_id) if k not in order]
    renamed: dict[str, str] = {}
    for def_id in reversed(order):  # nested definitions first: the ones using them name them as merged
        d = incoming[def_id]
        for inner in d.get("nodes", {}).values():
            if inner.get("type") in renamed:
                inner["type"] = renamed[inner["type"]]
        same = next((k for k, v in merged.items() if v == d), None)
        if same is not None:
            renamed[def_id] = same
        elif def_id in merged or def_id in taken:
            renamed[def_id] = _unique(def_id, set(merged) | set(taken))
            merged[renamed[def_id]] = d
        else:
            renamed[def_id] = def_id
            merged[def_id] = d
    return merged, renamed


def insert_blueprint(wf: Workflow, doc: dict[str, Any], pos: tuple[float, float]) -> tuple[Workflow, str]:
    """`wf` with the blueprint's definitions merged in and one instance of it at `pos`; returns the new
    instance's id."""
    out = wf.copy()
    out.subgraphs, renamed = merge_definitions(out.subgraphs, doc["subgraphs"], set(out.nodes))
    ((slug, raw),) = doc["nodes"].items()
    instance_id = _unique(slug, set(out.nodes))
    def_id = renamed.get(raw["type"], raw["type"])
    out.nodes[instance_id] = NodeInstance(instance_id, def_id, copy.deepcopy(raw.get("params", {})), {})
    out.ui.setdefault("nodes", {})[instance_id] = {"pos": [float(pos[0]), float(pos[1])]}
    return out, instance_id
