"""ComfyUI's UI format (the LiteGraph file the editor saves): nodes, links, widgets_values, groups,
subgraphs, muted/bypassed nodes, reroutes and primitive nodes, reduced to a `ComfyGraph`.

Lives here: `is_ui_format`, `parse_ui`, `WIDGET_TYPES`. Imports `nodes.comfy.graph`, `nodes.comfy.declarations`,
`nodes.comfy.subgraph_limits` (the totals), `nodes.workflow_json` (quoting).

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

Expansion is bounded on totals, not per level (subgraph_limits): a subgraph that contains itself, directly
or through others, is refused before anything is expanded, and every copy of a node, link and byte of node
data counts against one budget, so a 10 KB file whose subgraphs nest copies of each other is refused in
milliseconds instead of growing to k^16 nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from nodes.comfy.declarations import COMFY_CLASSES, CONTROL_VALUES, widget_values_by_name
from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.subgraph_limits import ExpansionBudget, list_field, refuse_self_containing, subgraph_name
from nodes.problems import quote

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
MAX_SUBGRAPH_DEPTH = 16
MAX_CHAIN = 64  # links one input may pass through (reroutes, bypasses, boundaries); real chains are short


def is_ui_format(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data


@dataclass(frozen=True)
class _Link:
    origin: str
    origin_slot: int
    target: str
    target_slot: int
    type: str


def _links(raw: Any, prefix: str, budget: ExpansionBudget) -> dict[int, _Link]:
    out: dict[int, _Link] = {}
    for item in list_field(raw):
        budget.take_link()
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
        for inp in list_field(raw.get("inputs"))
        if isinstance(inp, dict)
        and isinstance(inp.get("widget"), dict)
        and isinstance(inp["widget"].get("name"), str)
    ]
    return names or None


# What a subgraph input delivers when the instance neither wires nor sets it (newer editors keep such a
# promoted widget's value on the inner node only, listing it in the instance's `proxyWidgets`).
_UNFED = object()

# Subgraph input types that are widgets on the instance (the rest are sockets only: IMAGE, MODEL, ...).
WIDGET_TYPES = frozenset({"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"})  # inputs a widget can set


def _read_node(raw: dict[str, Any], prefix: str, graph: ComfyGraph) -> _RawNode | None:
    node_id, class_type = raw.get("id"), raw.get("type")
    if not isinstance(node_id, int | str) or isinstance(node_id, bool) or not isinstance(class_type, str):
        where = f" in subgraph instance {prefix[:-1]}" if prefix else ""
        graph.note(None, f"a node without an id or a type{where} was skipped (keys: {quote(sorted(raw))})")
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
    for inp in list_field(raw.get("inputs")):
        if isinstance(inp, dict):
            rn.input_names.append(str(inp.get("name", "")))
            rn.input_types.append(str(inp.get("type", "")))
            rn.input_links.append(inp.get("link") if isinstance(inp.get("link"), int) else None)
    for out in list_field(raw.get("outputs")):
        rn.output_types.append(str(out.get("type", "")) if isinstance(out, dict) else "")
    return rn


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


def parse_ui(data: dict[str, Any]) -> ComfyGraph:
    """The graph of a UI-format file; `ComfyFormatError` for a subgraph that contains itself or an
    expansion past the totals (nodes, links, node data)."""
    graph = ComfyGraph(source_format="ui")
    version = data.get("version")
    if version not in (None, 0.4, 1) or isinstance(version, bool):
        graph.note(None, f"UI format version {quote(version)}; this importer was written for 0.4 and 1")
    definitions = data.get("definitions")
    subgraphs = {
        sg["id"]: sg
        for sg in list_field(definitions.get("subgraphs") if isinstance(definitions, dict) else None)
        if isinstance(sg, dict) and isinstance(sg.get("id"), str)
    }
    refuse_self_containing(subgraphs)
    resolver = _Resolver(graph, subgraphs)
    resolver.add_scope(data.get("nodes"), resolver.scope_links(data.get("links"), ""), "", None)
    resolver.finish()

    for group in list_field(data.get("groups")):
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
        self.budget = ExpansionBudget()
        self.resolved: dict[tuple[str, int], Any] = {}  # (scope prefix, link id) -> what it delivers
        self.needs_at_least: dict[tuple[str, int], float] = {}  # links a cut-short walk still needed from it

    def scope_links(self, raw_links: Any, prefix: str) -> dict[int, _Link]:
        return _links(raw_links, prefix, self.budget)

    def _load_scope(
        self, raw_nodes: Any, prefix: str
    ) -> tuple[dict[str, _RawNode], dict[str, dict[str, Any]]]:
        nodes: dict[str, _RawNode] = {}
        raws: dict[str, dict[str, Any]] = {}
        for raw in list_field(raw_nodes):
            if not isinstance(raw, dict):
                continue
            self.budget.take_node(raw)  # before reading it: every copy of a subgraph's node counts
            rn = _read_node(raw, prefix, self.graph)
            if rn is not None:
                nodes[rn.node.id] = rn
                raws[rn.node.id] = raw
        return nodes, raws

    def add_scope(
        self, raw_nodes: Any, links: dict[int, _Link], prefix: str, boundary: _Boundary | None
    ) -> None:
        nodes, raws = self._load_scope(raw_nodes, prefix)
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
        if self.depth > MAX_SUBGRAPH_DEPTH:
            self.graph.note(
                rn.node, f"subgraphs nested deeper than {MAX_SUBGRAPH_DEPTH} levels: not expanded"
            )
            return
        inner = f"{rn.node.id}:"
        # The instance's own widget values feed the subgraph inputs: newer files keep one per widget-typed
        # input (a wired one's too: its value is not used), older ones only the unwired, in order.
        values = [v for v in list_field(rn.widget_values) if not (isinstance(v, str) and v in CONTROL_VALUES)]
        inputs: dict[int, Any] = {}
        sub_inputs = list_field(sub.get("inputs"))
        self.budget.take_link(len(sub_inputs))  # each is a boundary link of this copy
        widget_slots = [
            slot
            for slot, sub_input in enumerate(sub_inputs)
            if isinstance(sub_input, dict) and sub_input.get("type") in WIDGET_TYPES
        ]
        one_per_input = bool(widget_slots) and len(values) == len(widget_slots)
        slot_values = dict(zip(widget_slots, values, strict=False)) if one_per_input else {}
        # The instance lists the sockets it shows, which need not be every subgraph input: by name.
        by_name = dict(zip(rn.input_names, rn.input_links, strict=False))
        for slot, sub_input in enumerate(sub_inputs):
            name = sub_input.get("name") if isinstance(sub_input, dict) else None
            if any(by_name):  # the sockets are named: a subgraph input without one has no wire
                link_id = by_name.get(name) if isinstance(name, str) else None
            else:
                link_id = rn.input_links[slot] if slot < len(rn.input_links) else None
            if link_id is not None:
                inputs[slot] = ("link", prefix, link_id)
            elif one_per_input:
                if slot in slot_values:
                    inputs[slot] = ("value", slot_values[slot])
            elif values:
                inputs[slot] = ("value", values.pop(0))
        links = self.scope_links(sub.get("links"), inner)
        outputs: dict[int, tuple[str, int]] = {}
        for link_id, link in links.items():
            if link.target == f"{inner}{SUBGRAPH_OUTPUT_ID}":
                outputs[link.target_slot] = (inner, link_id)
        self.instance_outputs[rn.node.id] = outputs
        self.depth += 1
        title = quote(rn.node.title) if rn.node.title else subgraph_name(sub)
        self.graph.note(
            rn.node, f"subgraph {title} expanded in place ({len(list_field(sub.get('nodes')))} nodes)"
        )
        self.add_scope(sub.get("nodes"), links, inner, _Boundary(rn.node.id, inputs))
        self.depth -= 1

    # --- resolution -------------------------------------------------------------------------------

    def source(self, prefix: str, link_id: int) -> Any:
        """What a link delivers: a LinkRef to a real node's output, a constant, or None (dangling).

        Follows one chain through reroutes, bypassed nodes and subgraph boundaries, at most MAX_CHAIN
        links: a loop or a longer chain delivers nothing. Each link has one next link, so what a walk
        learns holds for every link on it: a finished walk's result, or for a walk cut short how many
        links at least each one still needed. Inputs fed from one chain then walk it once, not once each."""
        walked: list[tuple[str, int]] = []
        seen: set[tuple[str, int]] = set()
        at: tuple[str, int] | None = (prefix, link_id)
        result: Any = None
        while at is not None:
            if at in self.resolved:
                result = self.resolved[at]
                break
            depth = len(walked)
            needs = math.inf if at in seen else self.needs_at_least.get(at, 1)  # links from `at` on
            if depth + needs > MAX_CHAIN:
                for i, key in enumerate(walked):
                    self.needs_at_least[key] = max(self.needs_at_least.get(key, 1), depth - i + needs)
                return None
            walked.append(at)
            seen.add(at)
            result, at = self._step(*at)
        for key in walked:
            self.resolved[key] = result
        return result

    def _step(self, prefix: str, link_id: int) -> tuple[Any, tuple[str, int] | None]:
        """(what the link delivers, None), or (None, the link to follow next) through a pass-through."""
        link = self.links.get(prefix, {}).get(link_id)
        if link is None:
            return None, None
        origin = link.origin
        if origin == f"{prefix}{SUBGRAPH_INPUT_ID}":  # a subgraph input: continue outside the instance
            boundary = self.boundaries.get(prefix)
            feed = boundary.inputs.get(link.origin_slot) if boundary else None
            if feed is None:  # nothing on the instance: the inner widget keeps its own value (proxyWidgets)
                return _UNFED, None
            if feed[0] == "value":
                return feed[1], None
            return None, (feed[1], feed[2])
        if origin in self.instance_outputs:  # the output of a subgraph instance: continue inside it
            return None, self.instance_outputs[origin].get(link.origin_slot)
        rn = self.nodes.get(origin)
        if rn is None or rn.mode == MUTED:
            return None, None
        if rn.node.class_type in PRIMITIVE_CLASSES:
            # A primitive whose own widget is wired (inside a subgraph, from the instance's promoted prompt
            # box: FLUX.3 klein's) shows what the wire brings, as ComfyUI runs it; else its widget's value.
            wired = next((i for i in rn.input_links if i is not None), None)
            if wired is not None and not self._unfed(self.scope_of[rn.node.id], wired):
                return None, (self.scope_of[rn.node.id], wired)
            return self.widgets.get(origin, {}).get("value"), None
        if rn.node.class_type == "Reroute" or rn.mode == BYPASSED:
            return None, self._pass_through(rn, link)
        return LinkRef(origin, link.origin_slot), None

    def _unfed(self, prefix: str, link_id: int) -> bool:
        """Whether the link comes from a subgraph input the instance leaves unset."""
        link = self.links.get(prefix, {}).get(link_id)
        if link is None or link.origin != f"{prefix}{SUBGRAPH_INPUT_ID}":
            return False
        boundary = self.boundaries.get(prefix)
        return (boundary.inputs.get(link.origin_slot) if boundary else None) is None

    def _pass_through(self, rn: _RawNode, link: _Link) -> tuple[str, int] | None:
        """A reroute forwards its one input; a bypassed node its first input of the output's type."""
        want = rn.output_types[link.origin_slot] if link.origin_slot < len(rn.output_types) else ""
        prefix = self.scope_of[rn.node.id]
        for slot, link_id in enumerate(rn.input_links):
            if link_id is None:
                continue
            if rn.node.class_type == "Reroute" or want in ("", "*") or rn.input_types[slot] == want:
                return prefix, link_id
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
                if value is _UNFED and name in widgets:
                    continue  # a subgraph input the instance leaves unset: the widget's own value stands
                if value is None or value is _UNFED:
                    self.graph.note(
                        node, f"input {name!r} is wired to a muted or missing node: left unconnected"
                    )
                    node.inputs.pop(name, None)
                else:
                    node.inputs[name] = value
            self.graph.nodes[node_id] = node
