"""Subgraph edits on a workflow, without Qt: make one from a selection, expand it back, promote a widget, flatten.

Lives here: `make_subgraph`, `expand_instance`, `expand_subgraphs`, `promote_widget`, `demote_widget`, `definition_workflow`,
`set_definition_workflow`, `is_instance`. Imports `nodes.workflow`, `nodes.registry`, `nodes.subgraph_spec`.

Each edit is a pure function from a workflow to a new one (the input is never changed), so the editor's undo
is "put the old workflow back" and `app --run` runs exactly what the editor shows. `expand_subgraphs` is the
step before a run (`nodes.modes.apply_node_modes`): every instance becomes its inner nodes, ids
`<instance>/<inner>`, with the instance's wires and promoted widget values, nested instances too.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from nodes.problems import Problem
from nodes.registry import NodeRegistry
from nodes.subgraph_spec import MAX_NESTING
from nodes.workflow import Link, NodeInstance, Workflow, WorkflowError


def is_instance(wf: Workflow, node_id: str) -> bool:
    node = wf.nodes.get(node_id)
    return node is not None and node.type in wf.subgraphs


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    taken.add(out)
    return out


def make_subgraph(
    wf: Workflow, node_ids: list[str], title: str = "Subgraph", instance_id: str | None = None
) -> tuple[Workflow, str]:
    """The workflow with `node_ids` replaced by one instance of a new definition: one input per outside output
    wired in (all the inner ports it fed), one output per inner output wired out. Returns (workflow, id)."""
    chosen = [nid for nid in wf.nodes if nid in set(node_ids)]
    if not chosen:
        raise ValueError("select at least one node to make a subgraph")
    out = wf.copy()
    inside = set(chosen)
    slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "subgraph"
    def_id = _unique(f"subgraph/{slug}", set(out.subgraphs) | set(out.nodes))
    instance_id = instance_id or _unique(slug, set(out.nodes) - inside)
    inputs: dict[Link, dict[str, Any]] = {}  # one definition input per outside source
    names: set[str] = set()
    inner_nodes: dict[str, Any] = {}
    for nid in chosen:
        node = out.nodes[nid]
        for port, link in node.inputs.items():
            if link.node not in inside:
                entry = inputs.setdefault(link, {"name": _unique(port, names), "targets": []})
                entry["targets"].append([nid, port])
        raw = node.to_json()
        raw["inputs"] = {p: ln.to_json() for p, ln in node.inputs.items() if ln.node in inside}
        inner_nodes[nid] = raw
    outputs: dict[Link, str] = {}
    out_names: set[str] = set()
    leaving = {
        ln
        for nid, n in out.nodes.items()
        if nid not in inside
        for ln in n.inputs.values()
        if ln.node in inside
    }
    # Two inner outputs of one name ("conditioning" of both prompts) are named by their nodes instead.
    shared = {o for o in (ln.output for ln in leaving) if sum(ln.output == o for ln in leaving) > 1}
    for nid, node in out.nodes.items():
        if nid in inside:
            continue
        for port, link in list(node.inputs.items()):
            if link.node in inside:
                if link not in outputs:
                    name = link.node if link.output in shared else link.output
                    outputs[link] = _unique(name, out_names)
                node.inputs[port] = Link(instance_id, outputs[link])
    ui_nodes = out.ui.get("nodes", {})
    inner_ui = {nid: ui_nodes.pop(nid) for nid in chosen if nid in ui_nodes}
    points = [entry["pos"] for entry in inner_ui.values() if "pos" in entry] or [[0.0, 0.0]]
    out.subgraphs[def_id] = {
        "title": title,
        "nodes": inner_nodes,
        "ui": {"nodes": inner_ui},
        "inputs": list(inputs.values()),
        "outputs": [{"name": name, "source": link.to_json()} for link, name in outputs.items()],
        "widgets": [],
    }
    for nid in chosen:
        del out.nodes[nid]
    out.nodes[instance_id] = NodeInstance(
        instance_id, def_id, {}, {entry["name"]: link for link, entry in inputs.items()}
    )
    ui_nodes[instance_id] = {"pos": [min(p[0] for p in points), sum(p[1] for p in points) / len(points)]}
    return out, instance_id


def _inline(out: Workflow, instance_id: str, name: dict[str, str]) -> None:
    """Replace instance `instance_id` of `out` (changed in place) by its inner nodes, inner id `n` becoming
    `name[n]`; the instance's ui entry (mode, position) carries over to them."""
    instance = out.nodes.pop(instance_id)
    d = out.subgraphs[instance.type]
    inner_ui = d.get("ui", {}).get("nodes", {})
    ui_nodes = out.ui.setdefault("nodes", {})
    outer_ui = ui_nodes.pop(instance_id, {})
    fed: dict[tuple[str, str], Link] = {}
    for entry in d.get("inputs", []):
        link = instance.inputs.get(entry["name"])
        for node, port in entry["targets"]:
            if link is not None:
                fed[(node, port)] = link
    for nid, raw in d["nodes"].items():
        new = name[nid]
        inputs = {port: Link(name[src], output) for port, (src, output) in raw.get("inputs", {}).items()}
        inputs.update({port: link for (node, port), link in fed.items() if node == nid})
        params = copy.deepcopy(raw.get("params", {}))
        for widget in d.get("widgets", []):
            if widget["node"] == nid and widget["name"] in instance.params:
                params[widget["param"]] = copy.deepcopy(instance.params[widget["name"]])
        out.nodes[new] = NodeInstance(new, raw["type"], params, inputs, raw.get("version"))
        entry = copy.deepcopy(inner_ui.get(nid, {}))
        if "mode" in outer_ui:
            entry["mode"] = outer_ui["mode"]
        ui_nodes[new] = entry
    sources = {e["name"]: Link(name[e["source"][0]], e["source"][1]) for e in d.get("outputs", [])}
    for node in out.nodes.values():
        for port, link in list(node.inputs.items()):
            if link.node == instance_id and link.output in sources:
                node.inputs[port] = sources[link.output]


def expand_instance(wf: Workflow, instance_id: str) -> tuple[Workflow, list[str]]:
    """The workflow with one instance turned back into plain nodes (keeping their inner ids where free); the
    definition is dropped when nothing else uses it. Returns (workflow, the new node ids)."""
    out = wf.copy()
    d = out.subgraphs[out.nodes[instance_id].type]
    taken = set(out.nodes) - {instance_id}
    name = {nid: _unique(nid, taken) for nid in d["nodes"]}
    def_id = out.nodes[instance_id].type
    _inline(out, instance_id, name)
    if not any(n.type == def_id for n in out.nodes.values()) and not any(
        raw.get("type") == def_id for other in out.subgraphs.values() for raw in other["nodes"].values()
    ):
        del out.subgraphs[def_id]
    return out, list(name.values())


def expand_subgraphs(wf: Workflow) -> Workflow:
    """A copy with every instance (nested ones too) replaced by plain nodes: what a run runs."""
    out = wf.copy()
    for _ in range(MAX_NESTING + 1):
        instances = [nid for nid, n in out.nodes.items() if n.type in out.subgraphs]
        if not instances:
            out.subgraphs = {}
            return out
        for nid in instances:
            _inline(
                out, nid, {inner: f"{nid}/{inner}" for inner in out.subgraphs[out.nodes[nid].type]["nodes"]}
            )
    raise WorkflowError(
        [
            Problem(
                wf.source,
                None,
                "subgraphs",
                f"subgraphs nest more than {MAX_NESTING} deep (one inside itself?)",
            )
        ]
    )


def promote_widget(wf: Workflow, registry: NodeRegistry, def_id: str, node_id: str, param: str) -> Workflow:
    """The workflow with inner `node_id.param` shown on every instance of `def_id` (named `node.param`),
    each keeping the inner node's current value."""
    out = wf.copy()
    d = out.subgraphs[def_id]
    raw = d["nodes"][node_id]
    spec = registry.get(raw["type"])
    if spec is None or spec.param(param) is None:
        raise ValueError(f"{node_id!r} has no widget {param!r} to promote")
    name = f"{node_id}.{param}"
    if any(w["name"] == name for w in d.setdefault("widgets", [])):
        return out
    d["widgets"].append({"name": name, "node": node_id, "param": param})
    value = raw.get("params", {}).get(param, spec.param(param).default)
    for node in out.nodes.values():
        if node.type == def_id:
            node.params[name] = copy.deepcopy(value)
    return out


def demote_widget(wf: Workflow, def_id: str, node_id: str, param: str) -> Workflow:
    """The workflow with inner `node_id.param` no longer on the instances of `def_id`; the inner node takes
    the value of the first instance that had it, so a graph with one instance runs as before."""
    out = wf.copy()
    d = out.subgraphs[def_id]
    gone = [w for w in d.get("widgets", []) if (w["node"], w["param"]) == (node_id, param)]
    d["widgets"] = [w for w in d.get("widgets", []) if w not in gone]
    for widget in gone:
        values = [
            n.params.pop(widget["name"])
            for n in out.nodes.values()
            if n.type == def_id and widget["name"] in n.params
        ]
        if values:
            d["nodes"][node_id].setdefault("params", {})[param] = values[0]
    return out


def definition_workflow(wf: Workflow, def_id: str) -> Workflow:
    """A definition's inner graph as a workflow of its own, to edit in the canvas (other definitions kept, so
    nested instances read)."""
    d = wf.subgraphs[def_id]
    inner = Workflow(
        ui=copy.deepcopy(d.get("ui", {})), meta={"title": d.get("title", def_id)}, source=wf.source
    )
    inner.subgraphs = {k: copy.deepcopy(v) for k, v in wf.subgraphs.items() if k != def_id}
    for nid, raw in d["nodes"].items():
        inputs = {port: Link(*link) for port, link in raw.get("inputs", {}).items()}
        inner.nodes[nid] = NodeInstance(
            nid, raw["type"], copy.deepcopy(raw.get("params", {})), inputs, raw.get("version")
        )
    return inner


def set_definition_workflow(wf: Workflow, def_id: str, inner: Workflow) -> Workflow:
    """`wf` with definition `def_id`'s inner graph replaced by `inner` (after editing it); ports and widgets
    that point at inner nodes no longer there are dropped."""
    out = wf.copy()
    d = out.subgraphs[def_id]
    d["nodes"] = {nid: node.to_json() for nid, node in inner.nodes.items()}
    d["ui"] = {"nodes": copy.deepcopy(inner.ui.get("nodes", {}))}
    if inner.ui.get("groups"):
        d["ui"]["groups"] = copy.deepcopy(inner.ui["groups"])
    for entry in d.get("inputs", []):
        entry["targets"] = [t for t in entry["targets"] if t[0] in inner.nodes]
    d["outputs"] = [e for e in d.get("outputs", []) if e["source"][0] in inner.nodes]
    d["widgets"] = [w for w in d.get("widgets", []) if w["node"] in inner.nodes]
    # The inner graph carries copies of the other definitions (definition_workflow): a subgraph made inside
    # this one, or one nested in it and edited there, is newer than the outer copy.
    for k, v in inner.subgraphs.items():
        if k != def_id:
            out.subgraphs[k] = copy.deepcopy(v)
    return out
