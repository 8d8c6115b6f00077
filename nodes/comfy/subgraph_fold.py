"""ComfyUI subgraph instances kept as subgraphs for the editor: an import is flattened (nodes.comfy.ui_format,
inner ids `instance:inner`), and this folds each instance's nodes back into one of our subgraphs.

Lives here: `ComfyInstance`, `comfy_instances`, `fold_comfy_subgraphs`. Imports `nodes.comfy.ui_format` (the
widget types), `nodes.model_names` (the ids table key), `nodes.registry`, `nodes.subgraph`, `nodes.subgraph_spec`,
`nodes.workflow`. No Qt.

Folding is `nodes.subgraph.make_subgraph` on the nodes whose ComfyUI id lies under the instance, deepest
instances first, so what runs (`expand_subgraphs` before a run) is the flattened import again, node for node
and wire for wire. Instances of one ComfyUI subgraph share one definition when their folded inner graphs are
the same (compared by ComfyUI's inner ids); instances whose inner values differ get a definition each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodes.comfy.ui_format import WIDGET_TYPES
from nodes.model_names import COMFY_META_KEY
from nodes.registry import NodeRegistry
from nodes.subgraph import make_subgraph, promote_widget
from nodes.subgraph_spec import SubgraphRegistry
from nodes.workflow import Workflow

MUTED, BYPASSED = 2, 4  # as in nodes.comfy.ui_format: such instances are not expanded, so not folded


@dataclass(frozen=True)
class ComfyInstance:
    path: str  # ComfyUI's id of the instance, "12" or "12:5" inside another
    subgraph: str  # the ComfyUI subgraph id it is an instance of
    title: str
    pos: tuple[float, float] | None
    # (inner ComfyUI node id, widget name) that the instance's widget-typed subgraph inputs set, unwired
    widgets: tuple[tuple[str, str], ...] = ()


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def comfy_instances(data: Any) -> list[ComfyInstance]:
    """Every expanded subgraph instance of a UI-format file, nested ones too, outermost first."""
    definitions = data.get("definitions") if isinstance(data, dict) else None
    subgraphs = {
        sg["id"]: sg
        for sg in _list(definitions.get("subgraphs") if isinstance(definitions, dict) else None)
        if isinstance(sg, dict) and isinstance(sg.get("id"), str)
    }
    out: list[ComfyInstance] = []
    todo = [("", _list(data.get("nodes")) if isinstance(data, dict) else [], 0)]
    while todo:
        prefix, nodes, depth = todo.pop(0)
        for raw in nodes:
            if (
                not isinstance(raw, dict)
                or raw.get("type") not in subgraphs
                or raw.get("mode") in (MUTED, BYPASSED)
            ):
                continue
            sub = subgraphs[raw["type"]]
            path = f"{prefix}{raw.get('id')}"
            name = raw.get("title") or sub.get("name") or "Subgraph"
            pos = raw.get("pos")
            if isinstance(pos, dict):  # some files keep {"0": x, "1": y}
                pos = [pos.get("0"), pos.get("1")]
            point = (
                (float(pos[0]), float(pos[1]))
                if isinstance(pos, list)
                and len(pos) >= 2
                and all(isinstance(v, int | float) for v in pos[:2])
                else None
            )
            out.append(ComfyInstance(path, raw["type"], str(name), point, _widget_targets(raw, sub)))
            if depth < 16:  # the importer's own nesting cap (ui_format.MAX_SUBGRAPH_DEPTH)
                todo.append((f"{path}:", _list(sub.get("nodes")), depth + 1))
    return out


def _widget_targets(raw: dict[str, Any], sub: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The inner (node, widget) pairs fed by the instance's own widgets: ComfyUI shows them on the subgraph
    node, so the fold promotes them (an input the instance wires is a port instead)."""
    wired = {
        i.get("name") for i in _list(raw.get("inputs")) if isinstance(i, dict) and i.get("link") is not None
    }
    links = {link.get("id"): link for link in _list(sub.get("links")) if isinstance(link, dict)}
    inner = {str(n.get("id")): n for n in _list(sub.get("nodes")) if isinstance(n, dict)}
    out: list[tuple[str, str]] = []
    for entry in _list(sub.get("inputs")):
        if not isinstance(entry, dict) or entry.get("type") not in WIDGET_TYPES or entry.get("name") in wired:
            continue
        for link_id in _list(entry.get("linkIds")):
            link = links.get(link_id, {})
            node = inner.get(str(link.get("target_id")))
            slot = link.get("target_slot")
            sockets = _list(node.get("inputs")) if node else []
            if isinstance(slot, int) and 0 <= slot < len(sockets) and isinstance(sockets[slot], dict):
                socket = sockets[slot]
                widget = socket.get("widget") if isinstance(socket.get("widget"), dict) else {}
                name = widget.get("name") or socket.get("name")
                if isinstance(name, str):
                    out.append((str(link.get("target_id")), name))
    return tuple(out)


def _canonical(d: dict[str, Any], local: dict[str, str]) -> Any:
    """A definition with inner ids replaced by ComfyUI's inner ids, layout left out: equal for two instances
    of one ComfyUI subgraph whose inner graphs match."""

    def rename(node_id: str) -> str:
        return local.get(node_id, node_id)

    shown = {(w["node"], w["param"]) for w in d.get("widgets", [])}  # each instance has its own value
    nodes = {}
    for nid, raw in d["nodes"].items():
        nodes[rename(nid)] = {
            "type": raw["type"],
            "params": {k: v for k, v in raw.get("params", {}).items() if (nid, k) not in shown},
            "inputs": {p: [rename(src), out] for p, (src, out) in raw.get("inputs", {}).items()},
        }
    return {
        "nodes": nodes,
        "inputs": [
            {"name": e["name"], "targets": [[rename(n), p] for n, p in e["targets"]]} for e in d["inputs"]
        ],
        "outputs": [
            {"name": e["name"], "source": [rename(e["source"][0]), e["source"][1]]} for e in d["outputs"]
        ],
        "widgets": sorted([rename(n), p] for n, p in shown),
    }


def fold_comfy_subgraphs(wf: Workflow, data: Any, registry: NodeRegistry) -> Workflow:
    """`wf` (a flattened import of the UI-format `data`) with each ComfyUI subgraph instance as a subgraph,
    the widgets ComfyUI shows on the instance shown on ours (where our node has a field of that name)."""
    instances = comfy_instances(data)
    if not instances:
        return wf
    comfy = wf.meta.get(COMFY_META_KEY) if isinstance(wf.meta, dict) else None
    ids = dict(comfy.get("ids", {})) if isinstance(comfy, dict) else {}
    comfy_of = {nid: str(ids.get(nid, nid)) for nid in wf.nodes}
    out = wf.copy()
    made: dict[str, tuple[str, str]] = {}  # instance path -> (our instance id, definition id)
    for inst in sorted(instances, key=lambda i: -i.path.count(":")):  # deepest first
        inside = f"{inst.path}:"
        members = [nid for nid in out.nodes if comfy_of.get(nid, "").startswith(inside)]
        if not members:
            continue
        out, instance_id = make_subgraph(out, members, title=inst.title)
        comfy_of[instance_id] = inst.path
        made[inst.path] = (instance_id, out.nodes[instance_id].type)
        if inst.pos is not None:
            out.ui["nodes"][instance_id]["pos"] = list(inst.pos)
        out = _promote(out, registry, inst, made[inst.path][1], comfy_of)
    _share_definitions(out, instances, made, comfy_of)
    if isinstance(out.meta.get(COMFY_META_KEY), dict):
        # Our ids -> ComfyUI's for the nodes still at the top (export names them; inner ones are expanded again).
        out.meta[COMFY_META_KEY]["ids"] = {
            nid: comfy_of[nid] for nid in out.nodes if nid in comfy_of and comfy_of[nid] != nid
        }
    return out


def _promote(
    out: Workflow, registry: NodeRegistry, inst: ComfyInstance, def_id: str, comfy_of: dict[str, str]
) -> Workflow:
    d = out.subgraphs[def_id]
    ours = {comfy_of.get(nid): nid for nid in d["nodes"]}
    fed = {(n, p) for e in d["inputs"] for n, p in e["targets"]}
    for inner, name in inst.widgets:
        nid = ours.get(f"{inst.path}:{inner}")
        raw = d["nodes"].get(nid) if nid is not None else None
        if raw is None or name in raw.get("inputs", {}) or (nid, name) in fed:
            continue
        spec = SubgraphRegistry(registry, out.subgraphs).get(raw["type"])
        if spec is not None and spec.param(name) is not None:  # a ComfyUI widget our node has under its name
            out = promote_widget(out, registry, def_id, nid, name)
            d = out.subgraphs[def_id]
    return out


def _share_definitions(
    out: Workflow, instances: list[ComfyInstance], made: dict[str, tuple[str, str]], comfy_of: dict[str, str]
) -> None:
    """Instances of one ComfyUI subgraph whose folded graphs match use the first one's definition."""
    by_subgraph: dict[str, list[ComfyInstance]] = {}
    for inst in sorted(instances, key=lambda i: -i.path.count(":")):  # inner ones first: outer ones hold them
        if inst.path in made:
            by_subgraph.setdefault(inst.subgraph, []).append(inst)
    for group in by_subgraph.values():
        kept: list[tuple[str, Any, dict[str, str]]] = []  # (definition id, canonical form, its inner ids)
        for inst in group:
            def_id = made[inst.path][1]
            d = out.subgraphs[def_id]
            prefix = f"{inst.path}:"
            local = {
                nid: comfy_of[nid][len(prefix) :]
                for nid in d["nodes"]
                if comfy_of.get(nid, "").startswith(prefix)
            }
            form = _canonical(d, local)
            same = next(((k, ids) for k, f, ids in kept if f == form), None)
            if same is None:
                kept.append((def_id, form, local))
                continue
            _repoint(out, def_id, same[0], inst, made, here=same[1], there=local)


def _repoint(
    out: Workflow,
    old: str,
    new: str,
    inst: ComfyInstance,
    made: dict[str, tuple[str, str]],
    here: dict[str, str],
    there: dict[str, str],
) -> None:
    """Every use of definition `old` becomes `new` (the same inner graph under other inner ids)."""
    old_d, new_d = out.subgraphs[old], out.subgraphs[new]
    # Port names are made in the same order for matching graphs, so the instance's wires keep their names.
    if [e["name"] for e in old_d["inputs"]] != [e["name"] for e in new_d["inputs"]] or [
        e["name"] for e in old_d["outputs"]
    ] != [e["name"] for e in new_d["outputs"]]:
        return
    # Their promoted fields, by the new definition's names (the same inner node under the other inner id).
    names = {
        w["name"]: next(
            (
                x["name"]
                for x in new_d.get("widgets", [])
                if x["param"] == w["param"] and here[x["node"]] == there[w["node"]]
            ),
            None,
        )
        for w in old_d.get("widgets", [])
    }
    for node in out.nodes.values():
        if node.type == old:
            node.type = new
            node.params = {names.get(k) or k: v for k, v in node.params.items()}
    for d in out.subgraphs.values():
        for raw in d["nodes"].values():
            if raw.get("type") == old:
                raw["type"] = new
    del out.subgraphs[old]
    made[inst.path] = (made[inst.path][0], new)
