"""Seed control after a run ("control after generate") for seeds inside subgraphs (issue 29).

Lives here: `inner_seed_targets`, `apply_inner_seeds`. Imports `app.gui.run_queue` (the seed modes),
`nodes.workflow`.

A seed's mode is saved beside its node in `ui` (`app.gui.run_queue`); for a node inside a subgraph that is
the definition's `ui`, and the run's graph (instances expanded) names the node by its path
("prompts/sampler"). After the run the definition's inner node gets the next seed, so every instance of it
runs with that seed next time (they share the definition, as its other widgets). A seed promoted onto the
instance is the instance's own field (its mode is saved on the instance) and steps there as any other.
"""

from __future__ import annotations

import random
from typing import Any

from app.gui.run_queue import next_seed, seed_controls
from nodes.workflow import Workflow


def _definition_of(root: Workflow, path: list[str]) -> str | None:
    """The definition that holds the last node of `path` (instance ids from the root, then the inner node)."""
    node = root.nodes.get(path[0])
    def_id = node.type if node is not None else None
    for inner in path[1:-1]:
        raw = root.subgraphs.get(def_id or "", {}).get("nodes", {}).get(inner)
        def_id = raw.get("type") if isinstance(raw, dict) else None
    return def_id if def_id in root.subgraphs else None


def inner_seed_targets(root: Workflow, run: Workflow) -> dict[tuple[str, str, str], str]:
    """(definition, inner node, param) -> mode for each seed inside a subgraph the run used, with a mode that
    is not fixed, set by a widget (no wire into it, not promoted onto the instance)."""
    out: dict[tuple[str, str, str], str] = {}
    for (path, param), mode in seed_controls(run).items():
        parts = path.split("/")
        if len(parts) < 2 or param in run.nodes[path].inputs:
            continue
        def_id = _definition_of(root, parts)
        if def_id is None:
            continue
        d = root.subgraphs[def_id]
        inner = parts[-1]
        if any(w.get("node") == inner and w.get("param") == param for w in d.get("widgets", [])):
            continue  # promoted: the instance's field
        out[(def_id, inner, param)] = mode
    return out


def apply_inner_seeds(model: Any, run: Workflow, rng: random.Random) -> bool:
    """Step the inner seeds of `run` in the definitions of the editor's root graph (`model`, a
    `NestedGraphModel` at its root level); True when one changed (the file has unsaved changes then)."""
    if model.depth():  # a subgraph is open: its definition is being edited on the canvas, left as it is
        return False
    root = model.workflow
    changed = False
    for (def_id, inner, param), mode in inner_seed_targets(root, run).items():
        raw = root.subgraphs[def_id]["nodes"].get(inner)
        value = raw.get("params", {}).get(param) if isinstance(raw, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            raw["params"][param] = next_seed(value, mode, rng)
            changed = True
    return changed
