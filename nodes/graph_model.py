"""The editable graph behind the editor: a `GraphModel` over a `Workflow`, in QtNodes' style, without Qt.

Lives here: `Connection`, `GraphModel`. Imports `nodes.workflow`, `nodes.registry`, `nodes.reroute`, `nodes.spec`, `nodes.types`.

Queries (`node`, `connections`, `connection_possible`, ...) are split from changes (`add_node`,
`set_inputs`, `remove`, ...). Every change calls the listeners subscribed to its notification
(`node_created`, `node_removed`, `connection_created`, `connection_removed`, `param_changed`,
`node_moved`, `group_changed`, `node_ui_changed`, `reset`) with plain arguments, so the editor's scene can follow the
model and each undo command can be a single model call. Node ids are the workflow's own string ids,
so they stay the same across save and load. Snapshots for delete, copy and paste reuse the workflow
file format, with an extra `"outgoing"` list of links that leave the snapshot.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from nodes.registry import NodeRegistry
from nodes.reroute import link_type, passed_on_to
from nodes.spec import NodeSpec
from nodes.types import PortType, can_connect
from nodes.workflow import FORMAT, VERSION, Link, NodeInstance, Workflow, input_port_type

EVENTS = (
    "node_created",
    "node_removed",
    "connection_created",
    "connection_removed",
    "param_changed",
    "node_moved",
    "group_changed",
    "node_ui_changed",
    "reset",
)


@dataclass(frozen=True)
class Connection:
    out_node: str
    out_port: str
    in_node: str
    in_port: str


# Mixed-case acronyms read as one word ("LoadLoRA" is load_lora, not load_lo_ra).
_ACRONYMS = {"LoRA": "Lora", "ControlNet": "Controlnet", "GGUF": "Gguf"}


def _snake(name: str) -> str:
    """A type name as an id: "LoadLoRA" -> load_lora, "VAEDecode" -> vae_decode, "SaveImage" -> save_image."""
    for acronym, word in _ACRONYMS.items():
        name = name.replace(acronym, word)
    # A word starts at a capital after a lower-case letter or digit, or at the last capital of a run
    # of capitals followed by lower case (the D of VAEDecode).
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower() or "node"


class GraphModel:
    """A workflow being edited. Positions and groups live in the workflow's `ui` section."""

    def __init__(self, registry: NodeRegistry, workflow: Workflow | None = None) -> None:
        self.registry = registry
        self.workflow = workflow.copy() if workflow is not None else Workflow()
        self._listeners: dict[str, list[Callable[..., None]]] = {name: [] for name in EVENTS}
        self._ensure_ui()

    # -- notifications ----------------------------------------------------------------------------

    def subscribe(self, event: str, callback: Callable[..., None]) -> Callable[[], None]:
        """Call `callback(*args)` after every change of that kind; returns the unsubscribe function."""
        if event not in self._listeners:
            raise ValueError(f"unknown graph event {event!r}; one of {', '.join(EVENTS)}")
        self._listeners[event].append(callback)
        return lambda: self._listeners[event].remove(callback) if callback in self._listeners[event] else None

    def _notify(self, event: str, *args: Any) -> None:
        for callback in list(self._listeners[event]):
            callback(*args)

    def _ensure_ui(self) -> None:
        ui = self.workflow.ui
        ui.setdefault("nodes", {})
        ui.setdefault("groups", [])
        for node_id in self.workflow.nodes:
            ui["nodes"].setdefault(node_id, {}).setdefault("pos", [0.0, 0.0])

    # -- queries ----------------------------------------------------------------------------------

    def node_ids(self) -> list[str]:
        return list(self.workflow.nodes)

    def node(self, node_id: str) -> NodeInstance:
        return self.workflow.nodes[node_id]

    def spec(self, node_id: str) -> NodeSpec | None:
        return self.registry.get(self.workflow.nodes[node_id].type)

    def pos(self, node_id: str) -> tuple[float, float]:
        x, y = self.workflow.ui["nodes"][node_id]["pos"]
        return float(x), float(y)

    def groups(self) -> list[dict[str, Any]]:
        return self.workflow.ui["groups"]

    def connections(self) -> list[Connection]:
        return [
            Connection(link.node, link.output, nid, port)
            for nid, node in self.workflow.nodes.items()
            for port, link in node.inputs.items()
        ]

    def input_link(self, node_id: str, port: str) -> Link | None:
        return self.workflow.nodes[node_id].inputs.get(port)

    def output_type(self, node_id: str, port: str) -> PortType | None:
        """The type a wire from that output carries: through a reroute, the type of what feeds it (a
        reroute with nothing wired in gives its declared ANY)."""
        spec = self.spec(node_id)
        out = spec.output(port) if spec is not None else None
        if out is None:
            return None
        return link_type(self.workflow, self.registry, node_id, port) or out.type

    def _unfed_pass_through(self, node_id: str, port: str) -> bool:
        """A reroute output with nothing wired in upstream: it can be wired anywhere until it is fed."""
        spec = self.spec(node_id)
        out = spec.output(port) if spec is not None else None
        return (
            out is not None
            and out.passes is not None
            and link_type(self.workflow, self.registry, node_id, port) is None
        )

    def input_type(self, node_id: str, port: str) -> PortType | None:
        spec = self.spec(node_id)
        return input_port_type(spec, port) if spec is not None else None

    def upstream(self, node_id: str) -> set[str]:
        """Every node whose output reaches `node_id` (not including itself)."""
        seen: set[str] = set()
        todo = [node_id]
        while todo:
            for link in self.workflow.nodes[todo.pop()].inputs.values():
                if link.node in self.workflow.nodes and link.node not in seen:
                    seen.add(link.node)
                    todo.append(link.node)
        return seen

    def connection_possible(
        self, out_node: str, out_port: str, in_node: str, in_port: str
    ) -> tuple[bool, str]:
        """Whether that wire may be drawn, and why not when it may not."""
        for nid in (out_node, in_node):
            if nid not in self.workflow.nodes:
                return False, f"there is no node {nid!r}"
        source, target = self.output_type(out_node, out_port), self.input_type(in_node, in_port)
        if source is None:
            return False, f"{out_node} has no output {out_port!r}"
        if target is None:
            return False, f"{in_node} has no input {in_port!r}"
        if out_node == in_node:
            return False, "a node cannot feed itself"
        wildcard = self._unfed_pass_through(out_node, out_port)
        if not wildcard and not can_connect(source, target):
            return (
                False,
                f"{out_node}.{out_port} gives {source.name}, but {in_node}.{in_port} takes {target.name}",
            )
        if not wildcard:  # a reroute's input: what it will pass on must suit what it feeds
            for nid, port in passed_on_to(self.workflow, self.registry, in_node, in_port):
                takes = self.input_type(nid, port)
                if takes is not None and not can_connect(source, takes):
                    return (
                        False,
                        f"{out_node}.{out_port} gives {source.name}, but {in_node} passes it on to "
                        f"{nid}.{port}, which takes {takes.name}",
                    )
        if in_node in self.upstream(out_node):
            return False, f"that wire would make a loop: {in_node} already feeds {out_node}"
        return True, ""

    def new_id(self, type_name: str, taken: Iterable[str] = ()) -> str:
        """A readable unused id: "sampler", then "sampler_2", "sampler_3"..."""
        used = set(self.workflow.nodes) | set(taken)
        base = _snake(type_name)
        if base not in used:
            return base
        n = 2
        while f"{base}_{n}" in used:
            n += 1
        return f"{base}_{n}"

    def to_workflow(self) -> Workflow:
        """A copy of the workflow as it stands, for saving or running."""
        return self.workflow.copy()

    # -- changes ----------------------------------------------------------------------------------

    def load(self, workflow: Workflow) -> None:
        """Replace everything (open a file, New)."""
        self.workflow = workflow.copy()
        self._ensure_ui()
        self._notify("reset")

    def add_node(
        self,
        type_name: str,
        pos: tuple[float, float],
        params: dict[str, Any] | None = None,
        node_id: str | None = None,
        *,
        version: int | None | Literal["current"] = "current",
    ) -> str:
        """`version` is the node type version the params were written for: "current" for a new node, the
        saved one (None: unversioned) when putting back a snapshot whose params keep their old shape."""
        spec = self.registry.get(type_name)
        if spec is None:
            raise KeyError(f"unknown node type {type_name!r}")
        if node_id is None:
            node_id = self.new_id(spec.type)
        elif node_id in self.workflow.nodes:
            raise ValueError(f"node id {node_id!r} is already used")
        values = spec.default_params()
        values.update(copy.deepcopy(params or {}))
        stamped = spec.version if version == "current" else version
        self.workflow.nodes[node_id] = NodeInstance(node_id, spec.type, values, {}, stamped)
        self.workflow.ui["nodes"][node_id] = {"pos": [float(pos[0]), float(pos[1])]}
        self._notify("node_created", node_id)
        return node_id

    def remove_node(self, node_id: str) -> None:
        self.remove([node_id])

    def remove(
        self,
        node_ids: Iterable[str],
        group_indices: Iterable[int] = (),
        inputs: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Remove nodes (with every wire touching them), groups, and the wires into the given inputs."""
        ids = [nid for nid in node_ids if nid in self.workflow.nodes]
        doomed = set(ids)
        cut = set(inputs)
        group_indices = list(group_indices)
        for conn in self.connections():
            if conn.in_node in doomed or conn.out_node in doomed or (conn.in_node, conn.in_port) in cut:
                del self.workflow.nodes[conn.in_node].inputs[conn.in_port]
                self._notify("connection_removed", conn)
        for nid in ids:
            del self.workflow.nodes[nid]
            self.workflow.ui["nodes"].pop(nid, None)
            self._notify("node_removed", nid)
        for index in sorted(set(group_indices), reverse=True):
            if 0 <= index < len(self.groups()):
                del self.groups()[index]
        if group_indices:
            self._notify("group_changed", None)

    def set_inputs(self, changes: dict[tuple[str, str], Link | None]) -> None:
        """Point each (node, input) at a link, or disconnect it with None. Refuses impossible wires."""
        for (nid, port), link in changes.items():
            if link is not None:
                ok, reason = self.connection_possible(link.node, link.output, nid, port)
                if not ok:
                    raise ValueError(reason)
        for (nid, port), link in changes.items():
            inputs = self.workflow.nodes[nid].inputs
            old = inputs.get(port)
            if old == link:
                continue
            if old is not None:
                del inputs[port]
                self._notify("connection_removed", Connection(old.node, old.output, nid, port))
            if link is not None:
                inputs[port] = link
                self._notify("connection_created", Connection(link.node, link.output, nid, port))

    def connect(self, out_node: str, out_port: str, in_node: str, in_port: str) -> Connection:
        """Wire an output to an input, replacing whatever fed that input."""
        self.set_inputs({(in_node, in_port): Link(out_node, out_port)})
        return Connection(out_node, out_port, in_node, in_port)

    def disconnect(self, in_node: str, in_port: str) -> None:
        self.set_inputs({(in_node, in_port): None})

    def set_param(self, node_id: str, name: str, value: Any) -> None:
        node = self.workflow.nodes[node_id]
        if node.params.get(name) == value and type(node.params.get(name)) is type(value):
            return
        node.params[name] = value
        self._notify("param_changed", node_id, name, value)

    def move_node(self, node_id: str, pos: tuple[float, float]) -> None:
        self.move({node_id: pos})

    def move(
        self, nodes: dict[str, tuple[float, float]], groups: dict[int, list[float]] | None = None
    ) -> None:
        """Move nodes to positions and groups to rects, in one change (a drag is one undo step)."""
        for nid, (x, y) in nodes.items():
            self.workflow.ui["nodes"].setdefault(nid, {})["pos"] = [float(x), float(y)]
            self._notify("node_moved", nid, (float(x), float(y)))
        for index, rect in (groups or {}).items():
            self.groups()[index]["rect"] = [float(v) for v in rect]
            self._notify("group_changed", index)

    def node_ui(self, node_id: str, key: str) -> Any:
        return self.workflow.ui["nodes"].get(node_id, {}).get(key)

    def set_node_ui(self, key: str, values: dict[str, Any]) -> None:
        """Set an editor field of nodes (`collapsed`, `mode`, `title`...); None removes it (the default)."""
        for nid, value in values.items():
            entry = self.workflow.ui["nodes"].setdefault(nid, {})
            if entry.get(key) == value:
                continue
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = copy.deepcopy(value)
            self._notify("node_ui_changed", nid, key)

    def add_group(
        self, title: str, rect: list[float], color: str = "#3f5e7a", index: int | None = None
    ) -> int:
        group = {"title": title, "rect": [float(v) for v in rect], "color": color}
        index = len(self.groups()) if index is None else index
        self.groups().insert(index, group)
        self._notify("group_changed", None)
        return index

    def remove_group(self, index: int) -> dict[str, Any]:
        group = self.groups().pop(index)
        self._notify("group_changed", None)
        return group

    def update_group(self, index: int, **fields: Any) -> None:
        self.groups()[index].update(copy.deepcopy(fields))
        self._notify("group_changed", index)

    # -- snapshots (delete, copy, paste) ----------------------------------------------------------

    def snapshot(
        self,
        node_ids: Iterable[str],
        group_indices: Iterable[int] = (),
        inputs: Iterable[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        """The nodes (with all their inputs), their positions and groups, in the workflow file format.

        `inputs` adds wires into other nodes (a deleted wire), kept under "outgoing" for `restore`."""
        ids = [nid for nid in node_ids if nid in self.workflow.nodes]
        chosen = set(ids)
        extra = [
            [link.node, link.output, nid, port]
            for nid, port in inputs
            if nid not in chosen and (link := self.input_link(nid, port)) is not None
        ]
        groups = [
            dict(copy.deepcopy(self.groups()[i]), index=i)
            for i in sorted(set(group_indices))
            if 0 <= i < len(self.groups())
        ]
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": {},
            "nodes": {nid: self.workflow.nodes[nid].to_json() for nid in ids},
            "ui": {
                "nodes": {nid: copy.deepcopy(self.workflow.ui["nodes"][nid]) for nid in ids},
                "groups": groups,
            },
            "outgoing": [
                [c.out_node, c.out_port, c.in_node, c.in_port]
                for c in self.connections()
                if c.out_node in chosen and c.in_node not in chosen
            ]
            + extra,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Put a snapshot back with its own ids and every wire (undo of a delete, redo of a paste)."""
        self._insert(snapshot, {nid: nid for nid in snapshot.get("nodes", {})}, (0.0, 0.0), keep_outside=True)

    def paste(self, snapshot: dict[str, Any], offset: tuple[float, float] = (40.0, 40.0)) -> list[str]:
        """Insert copies with fresh ids, shifted by `offset`; wires from outside the snapshot are dropped."""
        mapping: dict[str, str] = {}
        for nid, raw in snapshot.get("nodes", {}).items():
            if isinstance(raw, dict) and raw.get("type") in self.registry:
                mapping[nid] = self.new_id(raw["type"], mapping.values())
        self._insert(snapshot, mapping, offset, keep_outside=False)
        return list(mapping.values())

    def _insert(
        self,
        snapshot: dict[str, Any],
        mapping: dict[str, str],
        offset: tuple[float, float],
        keep_outside: bool,
    ) -> None:
        raw_nodes: dict[str, Any] = snapshot.get("nodes", {})
        ui_nodes: dict[str, Any] = snapshot.get("ui", {}).get("nodes", {})
        dx, dy = offset
        for old, new in mapping.items():
            raw = raw_nodes[old]
            x, y = ui_nodes.get(old, {}).get("pos", [0.0, 0.0])
            saved = raw.get("version")
            # Params are copied verbatim, so the copy keeps the version they were saved under; stamping the
            # current spec version would hide an outdated node from validation and migration.
            self.add_node(
                raw["type"],
                (x + dx, y + dy),
                raw.get("params", {}),
                node_id=new,
                version=saved if isinstance(saved, int) and not isinstance(saved, bool) else None,
            )
            # The rest of the layout entry (size, title, mode, collapsed...) comes along.
            extra = {k: v for k, v in ui_nodes.get(old, {}).items() if k != "pos"}
            self.workflow.ui["nodes"][new].update(copy.deepcopy(extra))
            for key in extra:
                self._notify("node_ui_changed", new, key)
        links: dict[tuple[str, str], Link | None] = {}
        for old, new in mapping.items():
            for port, (src, out) in raw_nodes[old].get("inputs", {}).items():
                if src in mapping:
                    links[(new, port)] = Link(mapping[src], out)
                elif keep_outside and src in self.workflow.nodes:
                    links[(new, port)] = Link(src, out)
        if keep_outside:
            for src, out, dst, port in snapshot.get("outgoing", []):
                if dst in self.workflow.nodes and (src in mapping or src in self.workflow.nodes):
                    links[(dst, port)] = Link(mapping.get(src, src), out)
        self.set_inputs(
            {k: v for k, v in links.items() if v is None or self.connection_possible(v.node, v.output, *k)[0]}
        )
        for group in snapshot.get("ui", {}).get("groups", []):
            rect = list(group.get("rect", [0, 0, 200, 100]))
            rect[0], rect[1] = rect[0] + dx, rect[1] + dy
            index = group.get("index") if keep_outside else None
            self.add_group(
                group.get("title", "Group"),
                rect,
                group.get("color", "#3f5e7a"),
                index=min(index, len(self.groups())) if isinstance(index, int) else None,
            )
