"""ComfyUI's UI format (the LiteGraph file the editor saves): nodes, links, widgets_values, groups,
subgraphs, muted/bypassed nodes, reroutes and primitive nodes, reduced to a `ComfyGraph`.

Lives here: `is_ui_format`, `parse_ui`. Imports `nodes.comfy.graph`, `nodes.comfy.declarations`.

What gets resolved here, so that the mapping sees plain nodes and links:
- links: `[id, origin, origin_slot, target, target_slot, type]` lists (version 0.4) or objects (subgraphs,
  schema version 1);
- widgets: `widgets_values` named from each class's declaration (declarations.COMFY_CLASSES); a widget
  converted to an input and wired takes its value from the wire;
- Reroute nodes and PrimitiveNode / Primitive* nodes: followed through or inlined as constants;
- mode 2 (muted, "never"): left out, and said so; mode 4 (bypassed): each output wired to the node's first
  input of the same type, as ComfyUI runs it;
- subgraphs (`definitions.subgraphs`): each instance expanded in place, inner ids `instance:inner` (as
  ComfyUI's API format names them), the instance's inputs and outputs wired through;
- layout: positions, sizes, titles, colours, groups and Note/MarkdownNote text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodes.comfy.declarations import COMFY_CLASSES, CONTROL_VALUES, widget_values_by_name
from nodes.comfy.graph import ComfyGraph, ComfyNode, ImportNote, LinkRef

MUTED, BYPASSED = 2, 4
PRIMITIVE_CLASSES = frozenset(
    {
        "PrimitiveNode",
        "PrimitiveInt",
        "PrimitiveFloat",
        "PrimitiveString",
        "PrimitiveStringMultiline",
        "PrimitiveBoolean",
    }
)
NOTE_CLASSES = frozenset({"Note", "MarkdownNote"})
# Subgraph boundary pseudo-nodes in a subgraph's links.
SUBGRAPH_INPUT_ID, SUBGRAPH_OUTPUT_ID = -10, -20


def is_ui_format(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data


@dataclass(frozen=True)
class _Link:
    origin: str
    origin_slot: int
    target: str
    target_slot: int
    type: str


def _links(raw: Any, prefix: str) -> dict[int, _Link]:
    out: dict[int, _Link] = {}
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) >= 5:
            link_id, origin, origin_slot, target, target_slot = item[:5]
            kind = item[5] if len(item) > 5 else ""
        elif isinstance(item, dict):
            link_id, origin, origin_slot = item.get("id"), item.get("origin_id"), item.get("origin_slot")
            target, target_slot, kind = item.get("target_id"), item.get("target_slot"), item.get("type", "")
        else:
            continue
        if (
            not isinstance(link_id, int)
            or not isinstance(origin_slot, int)
            or not isinstance(target_slot, int)
        ):
            continue
        out[link_id] = _Link(
            _scoped(prefix, origin), origin_slot, _scoped(prefix, target), target_slot, str(kind)
        )
    return out


def _scoped(prefix: str, node_id: Any) -> str:
    """A node id inside a subgraph instance: "instance:inner"; boundary pseudo-nodes keep their number."""
    if node_id in (SUBGRAPH_INPUT_ID, SUBGRAPH_OUTPUT_ID):
        return f"{prefix}{node_id}" if prefix else str(node_id)
    return f"{prefix}{node_id}"


def _point(value: Any) -> tuple[float, float] | None:
    if isinstance(value, dict):  # some versions save {"0": x, "1": y}
        value = [value.get("0"), value.get("1")]
    if isinstance(value, list) and len(value) >= 2 and all(isinstance(v, int | float) for v in value[:2]):
        return float(value[0]), float(value[1])
    return None


@dataclass
class _RawNode:
    """A UI node before resolution: its sockets by slot, its widget values by name."""

    node: ComfyNode
    mode: int
    input_names: list[str] = field(default_factory=list)
    input_types: list[str] = field(default_factory=list)
    input_links: list[int | None] = field(default_factory=list)
    output_types: list[str] = field(default_factory=list)
    widget_values: Any = None


def _widget_names(class_type: str, raw: dict[str, Any]) -> list[str] | None:
    declared = COMFY_CLASSES.get(class_type)
    if declared is not None:
        return list(declared.widgets)
    # Unknown class: newer editors list every widget as an input with a `widget` entry, in order.
    names = [
        inp["widget"]["name"]
        for inp in raw.get("inputs") or ()
        if isinstance(inp, dict) and isinstance(inp.get("widget"), dict) and "name" in inp["widget"]
    ]
    return names or None


def _read_node(raw: dict[str, Any], prefix: str, graph: ComfyGraph) -> _RawNode | None:
    node_id, class_type = raw.get("id"), raw.get("type")
    if node_id is None or not isinstance(class_type, str):
        graph.notes.append(_file_note(f"a node without an id or type was skipped: {str(raw)[:80]}"))
        return None
    node = ComfyNode(
        id=_scoped(prefix, node_id),
        class_type=class_type,
        title=raw.get("title") if isinstance(raw.get("title"), str) else None,
        pos=_point(raw.get("pos")),
        size=_point(raw.get("size")),
        color=raw.get("color") if isinstance(raw.get("color"), str) else None,
        collapsed=isinstance(raw.get("flags"), dict) and raw["flags"].get("collapsed") is True,
    )
    mode = raw.get("mode", 0) if isinstance(raw.get("mode"), int) else 0
    rn = _RawNode(node, mode, widget_values=raw.get("widgets_values"))
    for inp in raw.get("inputs") or ():
        if isinstance(inp, dict):
            rn.input_names.append(str(inp.get("name", "")))
            rn.input_types.append(str(inp.get("type", "")))
            rn.input_links.append(inp.get("link") if isinstance(inp.get("link"), int) else None)
    for out in raw.get("outputs") or ():
        rn.output_types.append(str(out.get("type", "")) if isinstance(out, dict) else "")
    return rn


def _file_note(message: str) -> ImportNote:
    return ImportNote(None, None, message)


def _named_widgets(rn: _RawNode, raw: dict[str, Any], graph: ComfyGraph) -> dict[str, Any]:
    values = rn.widget_values
    if isinstance(values, dict):  # some nodes save widgets by name already
        return dict(values)
    if not isinstance(values, list):
        return {}
    names = _widget_names(rn.node.class_type, raw)
    if names is None:
        return {"widgets_values": values} if values else {}
    named, notes = widget_values_by_name(names, values)
    for message in notes:
        graph.note(rn.node, message)
    return named


def _load_scope(
    raw_nodes: Any, raw_links: Any, prefix: str, graph: ComfyGraph
) -> tuple[dict[str, _RawNode], dict[str, dict[str, Any]], dict[int, _Link]]:
    nodes: dict[str, _RawNode] = {}
    raws: dict[str, dict[str, Any]] = {}
    for raw in raw_nodes if isinstance(raw_nodes, list) else ():
        if not isinstance(raw, dict):
            continue
        rn = _read_node(raw, prefix, graph)
        if rn is not None:
            nodes[rn.node.id] = rn
            raws[rn.node.id] = raw
    return nodes, raws, _links(raw_links, prefix)


def parse_ui(data: dict[str, Any]) -> ComfyGraph:
    graph = ComfyGraph(source_format="ui")
    version = data.get("version")
    if version not in (None, 0.4, 1):
        graph.notes.append(
            _file_note(f"UI format version {version!r}; this importer was written for 0.4 and 1")
        )
    subgraphs = {
        sg["id"]: sg
        for sg in (data.get("definitions") or {}).get("subgraphs") or ()
        if isinstance(sg, dict) and isinstance(sg.get("id"), str)
    }
    resolver = _Resolver(graph, subgraphs)
    resolver.add_scope(data.get("nodes"), data.get("links"), prefix="", boundary=None)
    resolver.finish()

    for group in data.get("groups") or ():
        rect = group.get("bounding") if isinstance(group, dict) else None
        if isinstance(rect, list) and len(rect) == 4 and all(isinstance(v, int | float) for v in rect):
            entry: dict[str, Any] = {"title": str(group.get("title", "")), "rect": [float(v) for v in rect]}
            if isinstance(group.get("color"), str):
                entry["color"] = group["color"]
            graph.groups.append(entry)
    ds = (data.get("extra") or {}).get("ds") if isinstance(data.get("extra"), dict) else None
    if isinstance(ds, dict) and isinstance(ds.get("scale"), int | float):
        graph.view = {"zoom": float(ds["scale"])}
        offset = _point(ds.get("offset"))
        if offset is not None:
            graph.view["offset"] = list(offset)
    return graph


@dataclass(frozen=True)
class _Boundary:
    """How a subgraph instance connects to the scope around it."""

    instance: str
    inputs: dict[int, Any]  # subgraph input slot -> LinkRef or constant from the outer scope


class _Resolver:
    """Collects nodes from every scope, then resolves links through reroutes, primitives, bypassed and
    subgraph-boundary nodes into plain `LinkRef`s or constants."""

    def __init__(self, graph: ComfyGraph, subgraphs: dict[str, dict[str, Any]]) -> None:
        self.graph, self.subgraphs = graph, subgraphs
        self.nodes: dict[str, _RawNode] = {}
        self.links: dict[str, dict[int, _Link]] = {}  # scope prefix -> links
        self.scope_of: dict[str, str] = {}  # node id -> scope prefix
        self.boundaries: dict[str, _Boundary] = {}  # scope prefix -> its instance boundary
        # instance id -> {output slot -> (scope prefix, link id into the output pseudo-node)}
        self.instance_outputs: dict[str, dict[int, tuple[str, int]]] = {}
        self.widgets: dict[str, dict[str, Any]] = {}
        self.depth = 0

    def add_scope(self, raw_nodes: Any, raw_links: Any, prefix: str, boundary: _Boundary | None) -> None:
        nodes, raws, links = _load_scope(raw_nodes, raw_links, prefix, self.graph)
        self.links[prefix] = links
        if boundary is not None:
            self.boundaries[prefix] = boundary
        for node_id, rn in nodes.items():
            self.scope_of[node_id] = prefix
            sub = self.subgraphs.get(rn.node.class_type)
            if sub is not None and rn.mode not in (MUTED, BYPASSED):
                self._expand(rn, raws[node_id], sub, prefix)
                continue
            self.nodes[node_id] = rn
            if rn.node.class_type in PRIMITIVE_CLASSES:  # [value, control_after_generate?]
                values = rn.widget_values if isinstance(rn.widget_values, list) else []
                self.widgets[node_id] = {"value": values[0]} if values else {}
            else:
                self.widgets[node_id] = _named_widgets(rn, raws[node_id], self.graph)

    def _expand(self, rn: _RawNode, raw: dict[str, Any], sub: dict[str, Any], prefix: str) -> None:
        if self.depth > 16:
            self.graph.note(rn.node, "subgraphs nested deeper than 16 levels: not expanded")
            return
        inner = f"{rn.node.id}:"
        # The instance's own widget values feed the subgraph inputs that have no wire, in order.
        values = list(rn.widget_values) if isinstance(rn.widget_values, list) else []
        values = [v for v in values if v not in CONTROL_VALUES]
        inputs: dict[int, Any] = {}
        sub_inputs = sub.get("inputs") or []
        for slot, _sub_input in enumerate(sub_inputs):
            link_id = rn.input_links[slot] if slot < len(rn.input_links) else None
            if link_id is not None:
                inputs[slot] = ("link", prefix, link_id)
            elif values:
                inputs[slot] = ("value", values.pop(0))
        outputs: dict[int, tuple[str, int]] = {}
        for link_id, link in _links(sub.get("links"), inner).items():
            if link.target == f"{inner}{SUBGRAPH_OUTPUT_ID}":
                outputs[link.target_slot] = (inner, link_id)
        self.instance_outputs[rn.node.id] = outputs
        self.depth += 1
        title = rn.node.title or sub.get("name")
        self.graph.note(
            rn.node, f"subgraph {title!r} expanded in place ({len(sub.get('nodes') or [])} nodes)"
        )
        self.add_scope(sub.get("nodes"), sub.get("links"), inner, _Boundary(rn.node.id, inputs))
        self.depth -= 1

    # --- resolution -------------------------------------------------------------------------------

    def source(self, prefix: str, link_id: int, seen: frozenset[tuple[str, int]] = frozenset()) -> Any:
        """What a link delivers: a LinkRef to a real node's output, a constant, or None (dangling)."""
        link = self.links.get(prefix, {}).get(link_id)
        if link is None or (prefix, link_id) in seen or len(seen) > 256:
            return None
        seen = seen | {(prefix, link_id)}
        origin = link.origin
        if origin == f"{prefix}{SUBGRAPH_INPUT_ID}":  # a subgraph input: continue outside the instance
            boundary = self.boundaries.get(prefix)
            feed = boundary.inputs.get(link.origin_slot) if boundary else None
            if feed is None:
                return None
            if feed[0] == "value":
                return feed[1]
            return self.source(feed[1], feed[2], seen)
        if origin in self.instance_outputs:  # the output of a subgraph instance: continue inside it
            inner = self.instance_outputs[origin].get(link.origin_slot)
            return self.source(inner[0], inner[1], seen) if inner else None
        rn = self.nodes.get(origin)
        if rn is None:
            return None
        if rn.mode == MUTED:
            return None
        if rn.node.class_type in PRIMITIVE_CLASSES:
            return self.widgets.get(origin, {}).get("value")
        if rn.node.class_type == "Reroute" or rn.mode == BYPASSED:
            return self._pass_through(rn, link, seen)
        return LinkRef(origin, link.origin_slot)

    def _pass_through(self, rn: _RawNode, link: _Link, seen: frozenset[tuple[str, int]]) -> Any:
        """A reroute forwards its one input; a bypassed node its first input of the output's type."""
        want = rn.output_types[link.origin_slot] if link.origin_slot < len(rn.output_types) else ""
        prefix = self.scope_of[rn.node.id]
        for slot, link_id in enumerate(rn.input_links):
            if link_id is None:
                continue
            if rn.node.class_type == "Reroute" or want in ("", "*") or rn.input_types[slot] == want:
                return self.source(prefix, link_id, seen)
        return None

    def finish(self) -> None:
        for node_id, rn in self.nodes.items():
            node, cls = rn.node, rn.node.class_type
            if rn.mode == MUTED:
                self.graph.note(
                    node, "muted in ComfyUI (mode 2): not imported; nothing downstream gets its outputs"
                )
                continue
            if rn.mode == BYPASSED:
                self.graph.note(
                    node, "bypassed in ComfyUI (mode 4): its inputs are wired through to its outputs"
                )
                continue
            if cls == "Reroute" or cls in PRIMITIVE_CLASSES:
                continue  # resolved into the links that pass through them
            widgets = self.widgets.get(node_id, {})
            if cls in NOTE_CLASSES:
                text = widgets.get("text", "")
                entry = {"text": str(text), "title": node.title or cls}
                if node.pos is not None:
                    entry["pos"] = list(node.pos)
                self.graph.text_notes.append(entry)
                continue
            node.inputs = dict(widgets)
            prefix = self.scope_of[node_id]
            for slot, link_id in enumerate(rn.input_links):
                if link_id is None:
                    continue
                name = rn.input_names[slot]
                value = self.source(prefix, link_id)
                if value is None:
                    self.graph.note(
                        node, f"input {name!r} is wired to a muted or missing node: left unconnected"
                    )
                    node.inputs.pop(name, None)
                else:
                    node.inputs[name] = value
            self.graph.nodes[node_id] = node
