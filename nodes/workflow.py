"""Workflow files, version 1: the data classes, loading with full validation, and atomic saving.

Lives here: `Workflow`, `NodeInstance`, `Link`, `load_workflow`, `workflow_from_dict`, `parse_workflow`,
`validate`, `save_workflow`; re-exports `Problem`, `WorkflowError` (nodes.problems), `read_workflow_json`
(nodes.workflow_json: reading untrusted files with limits) and `atomic_write_text` (nodes.files).
Imports `nodes.spec`, `nodes.types`, `nodes.registry`, `nodes.reroute` (types through reroutes), `nodes.problems`,
`nodes.files`, `nodes.workflow_json`, `nodes.subgraph_spec` (subgraph definitions as node types).

The file is JSON:

    {"format": "nodeloom.workflow", "version": 1,
     "meta": {"title": "...", "description": "..."},
     "nodes": {"sampler": {"type": "Sampler", "params": {"steps": 20},
                           "inputs": {"latent": ["latent", "latent"]}}},
     "ui": {"nodes": {"sampler": {"pos": [500, 120]}}, "groups": [...], "view": {...}}}

`ui.nodes.<id>` may also hold the editor's `title`, `mode` (bypass/mute) and `collapsed` (title bar only).

Values are by name, never by position. Loading reports every problem at once, each naming the file,
the node, the field and the reason. Any parameter may be fed by a wire instead of its widget: the
link then sits in `inputs` under the parameter's name.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.files import atomic_write_text as atomic_write_text  # re-exported: callers import it from here
from nodes.problems import Problem as Problem  # re-exported: callers import these from here
from nodes.problems import WorkflowError as WorkflowError
from nodes.problems import quote
from nodes.registry import NodeRegistry
from nodes.reroute import link_type
from nodes.spec import NodeSpec, Param
from nodes.subgraph_spec import definition_problems, with_subgraphs
from nodes.types import PortType, can_connect
from nodes.workflow_json import check_json_value
from nodes.workflow_json import read_workflow_json as read_workflow_json

FORMAT = "nodeloom.workflow"
VERSION = 1


@dataclass(frozen=True)
class Link:
    node: str
    output: str

    def to_json(self) -> list[str]:
        return [self.node, self.output]


@dataclass
class NodeInstance:
    id: str
    type: str
    params: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Link] = field(default_factory=dict)
    version: int | None = None  # the node type's version when the file was saved

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.version is not None:
            out["version"] = self.version
        out["params"] = dict(self.params)
        out["inputs"] = {port: link.to_json() for port, link in self.inputs.items()}
        return out


@dataclass
class Workflow:
    nodes: dict[str, NodeInstance] = field(default_factory=dict)
    ui: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"  # the file it came from, for messages
    # Subgraph definitions by id, as saved (nodes.subgraph_spec); an instance's type is its definition's id.
    subgraphs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "meta": copy.deepcopy(self.meta),
            "nodes": {node_id: node.to_json() for node_id, node in self.nodes.items()},
            "ui": copy.deepcopy(self.ui),
        } | ({"subgraphs": copy.deepcopy(self.subgraphs)} if self.subgraphs else {})

    def copy(self) -> Workflow:
        return Workflow(
            nodes={
                k: NodeInstance(n.id, n.type, copy.deepcopy(n.params), dict(n.inputs), n.version)
                for k, n in self.nodes.items()
            },
            ui=copy.deepcopy(self.ui),
            meta=copy.deepcopy(self.meta),
            source=self.source,
            subgraphs=copy.deepcopy(self.subgraphs),
        )


def param_port_type(param: Param) -> PortType:
    """The wire type a parameter accepts when it is fed by a link instead of its widget (its kind's)."""
    return param.kind.port_type


def input_port_type(spec: NodeSpec, port: str) -> PortType | None:
    """The type a port accepts: a declared input, or a parameter fed by a wire."""
    declared = spec.input(port)
    if declared is not None:
        return declared.type
    param = spec.param(port)
    return param_port_type(param) if param is not None else None


def _suggest(name: str, options: list[str]) -> str:
    if len(name) > 64:  # difflib is quadratic; nothing that long is a typo of a real name
        return ""
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _is_point(value: Any, size: int = 2) -> bool:
    return (
        isinstance(value, list)
        and len(value) == size
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def _clean_ui(ui: Any) -> dict[str, Any]:
    """Keep the layout entries that have the right shape; a damaged layout never blocks opening a graph."""
    if not isinstance(ui, dict):
        return {}
    out = dict(ui)
    nodes = ui.get("nodes")
    out["nodes"] = {
        nid: {k: v for k, v in entry.items() if k not in ("pos", "size") or _is_point(v)}
        for nid, entry in (nodes.items() if isinstance(nodes, dict) else ())
        if isinstance(entry, dict)
    }
    groups = ui.get("groups")
    out["groups"] = [
        g
        for g in (groups if isinstance(groups, list) else ())
        if isinstance(g, dict) and isinstance(g.get("title", ""), str) and _is_point(g.get("rect"), 4)
    ]
    if not isinstance(ui.get("view", {}), dict):
        out.pop("view")
    return out


def _parse(data: Any, source: str, problems: list[Problem]) -> Workflow:
    """Structure only: turn JSON into a Workflow, noting every shape problem."""
    wf = Workflow(source=source)
    if not isinstance(data, dict):
        problems.append(Problem(source, None, None, "the file is not a JSON object"))
        return wf
    if data.get("format") != FORMAT:
        problems.append(
            Problem(source, None, "format", f"expected {FORMAT!r}, got {quote(data.get('format'))}")
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append(
            Problem(source, None, "version", f"expected an integer version, got {quote(version)}")
        )
    elif version != VERSION:
        problems.append(
            Problem(
                source,
                None,
                "version",
                f"unsupported version {version}; this Nodeloom reads version {VERSION}",
            )
        )
    wf.meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    wf.ui = _clean_ui(data.get("ui"))
    subgraphs = data.get("subgraphs", {})
    if isinstance(subgraphs, dict):
        for def_id, definition in subgraphs.items():
            problems.extend(definition_problems(source, def_id, definition))
        wf.subgraphs = dict(subgraphs)
    else:
        problems.append(
            Problem(source, None, "subgraphs", "expected an object of subgraph definitions by id")
        )
    nodes = data.get("nodes")
    if not isinstance(nodes, dict):
        problems.append(Problem(source, None, "nodes", "expected an object of nodes keyed by id"))
        return wf
    for node_id, raw in nodes.items():
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            problems.append(Problem(source, node_id, "type", "each node needs a string 'type'"))
            continue
        params = raw.get("params", {})
        if not isinstance(params, dict):
            problems.append(Problem(source, node_id, "params", "expected an object of parameters by name"))
            params = {}
        inputs: dict[str, Link] = {}
        raw_inputs = raw.get("inputs", {})
        if not isinstance(raw_inputs, dict):
            problems.append(Problem(source, node_id, "inputs", "expected an object of inputs by name"))
            raw_inputs = {}
        for port, link in raw_inputs.items():
            ok = isinstance(link, list) and len(link) == 2 and all(isinstance(x, str) for x in link)
            if not ok:
                problems.append(
                    Problem(source, node_id, port, f"a link is [node_id, output_name], got {quote(link)}")
                )
                continue
            inputs[port] = Link(link[0], link[1])
        version = raw.get("version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            problems.append(
                Problem(source, node_id, "version", f"expected a whole number >= 1, got {quote(version)}")
            )
            version = None
        wf.nodes[node_id] = NodeInstance(node_id, raw["type"], dict(params), inputs, version)
    return wf


def find_cycle(wf: Workflow) -> list[str]:
    """Node ids that sit on a cycle (empty when the graph is acyclic).

    Peel off nodes with no unfinished inputs (Kahn), then nodes feeding nothing that is left: what
    remains lies on a cycle, not merely downstream or upstream of one.
    """
    deps = {
        nid: {link.node for link in n.inputs.values() if link.node in wf.nodes} for nid, n in wf.nodes.items()
    }
    users: dict[str, set[str]] = {nid: set() for nid in deps}
    for nid, sources in deps.items():
        for source in sources:
            users[source].add(nid)
    left = set(deps)
    for edges, reverse in ((deps, users), (users, deps)):
        # Count each node's edges to nodes still left; peel those at zero, updating their neighbours.
        count = {nid: len(edges[nid] & left) for nid in left}
        ready = [nid for nid, c in count.items() if c == 0]
        while ready:
            nid = ready.pop()
            left.discard(nid)
            for other in reverse[nid] & left:
                count[other] -= 1
                if count[other] == 0:
                    ready.append(other)
    return sorted(left)


def validate(wf: Workflow, registry: NodeRegistry) -> list[Problem]:
    """Every reason this workflow cannot run. Missing parameters are filled with their defaults."""
    problems: list[Problem] = []
    src = wf.source
    registry = with_subgraphs(registry, wf)  # a subgraph instance's type is its definition
    known_types = [spec.type for spec in registry]
    for node_id, node in wf.nodes.items():
        spec = registry.get(node.type)
        if spec is None:
            problems.append(
                Problem(
                    src,
                    node_id,
                    "type",
                    f"unknown node type {quote(node.type)}{_suggest(node.type, known_types)}",
                )
            )
            continue
        if node.version is not None and node.version > spec.version:
            problems.append(
                Problem(
                    src,
                    node_id,
                    "version",
                    f"saved by a newer {spec.type} (version "
                    f"{node.version}); this Nodeloom has version {spec.version}",
                )
            )
        param_names = [p.name for p in spec.params]
        for name in node.params:
            if spec.param(name) is None:
                problems.append(
                    Problem(
                        src, node_id, name, f"unknown parameter for {spec.type}{_suggest(name, param_names)}"
                    )
                )
        for param in spec.params:
            if param.name not in node.params:
                node.params[param.name] = copy.deepcopy(param.default)
            if param.name in node.inputs:
                continue  # fed by a wire: the widget value is not used
            reason = param.check(node.params[param.name])
            if reason is not None:
                problems.append(Problem(src, node_id, param.name, reason))
        port_names = [p.name for p in spec.inputs] + param_names
        for port, link in node.inputs.items():
            target = input_port_type(spec, port)
            if target is None:
                problems.append(
                    Problem(src, node_id, port, f"unknown input for {spec.type}{_suggest(port, port_names)}")
                )
                continue
            source_node = wf.nodes.get(link.node)
            if source_node is None:
                problems.append(
                    Problem(src, node_id, port, f"linked to node {quote(link.node)}, which does not exist")
                )
                continue
            source_spec = registry.get(source_node.type)
            if source_spec is None:
                continue  # already reported as an unknown type
            out = source_spec.output(link.output)
            if out is None:
                names = [o.name for o in source_spec.outputs]
                problems.append(
                    Problem(
                        src,
                        node_id,
                        port,
                        f"node {quote(link.node)} ({source_spec.type}) has no "
                        f"output {quote(link.output)}{_suggest(link.output, names)}",
                    )
                )
                continue
            carried = link_type(wf, registry, link.node, link.output)  # through reroutes
            if carried is not None and not can_connect(carried, target):
                problems.append(
                    Problem(
                        src,
                        node_id,
                        port,
                        f"type mismatch: {quote(link.node)[1:-1]}.{quote(link.output)[1:-1]} gives "
                        f"{carried.name}, this input takes {target.name}",
                    )
                )
        for inp in spec.inputs:
            if not inp.optional and inp.name not in node.inputs:
                problems.append(
                    Problem(
                        src,
                        node_id,
                        inp.name,
                        f"required input {inp.name!r} ({inp.type.name}) is not connected",
                    )
                )
    cycle = find_cycle(wf)
    if cycle:
        shown = " -> ".join(quote(n, 40)[1:-1] for n in cycle[:8]) + (" -> ..." if len(cycle) > 8 else "")
        for node_id in cycle:
            problems.append(Problem(src, node_id, "inputs", f"part of a cycle: {shown}"))
    return problems


def _value_problem(source: str, where: tuple[Any, ...], reason: str) -> Problem:
    """A problem at a key path: `nodes.<id>.params.<name>` names the node and the field."""
    if len(where) >= 2 and where[0] == "nodes":
        if len(where) >= 4 and where[2] in ("params", "inputs"):
            field: Any = where[3]
        else:
            field = where[2] if len(where) >= 3 else None
        return Problem(source, str(where[1]), None if field is None else str(field), reason)
    path = ".".join(str(k) if len(str(k)) <= 40 else f"{str(k)[:40]}…" for k in where[:8])
    return Problem(source, None, path or None, reason)


def parse_workflow(
    data: Any, registry: NodeRegistry, *, source: str = "<memory>"
) -> tuple[Workflow, list[Problem]]:
    """Parse and validate without raising: the workflow as far as it could be read, and every problem.

    The editor uses this to open an unfinished graph (say, an input not yet wired) for editing.
    """
    problems: list[Problem] = []
    # Depth and lone surrogates: a value built in memory (a paste, an import) never went through the reader.
    bad = check_json_value(data)
    if bad:
        return Workflow(source=source), [_value_problem(source, where, reason) for where, reason in bad]
    wf = _parse(data, source, problems)
    if not any(p.field in ("format", "version", "nodes") and p.node is None for p in problems):
        problems.extend(validate(wf, registry))
    return wf, problems


def workflow_from_dict(data: Any, registry: NodeRegistry, *, source: str = "<memory>") -> Workflow:
    """Parse and validate; raises `WorkflowError` listing every problem."""
    wf, problems = parse_workflow(data, registry, source=source)
    if problems:
        raise WorkflowError(problems)
    return wf


def load_workflow(path: Path | str, registry: NodeRegistry) -> Workflow:
    path = Path(path)
    return workflow_from_dict(read_workflow_json(path), registry, source=str(path))


def dumps_workflow(wf: Workflow) -> str:
    return json.dumps(wf.to_dict(), indent=2, ensure_ascii=False) + "\n"


def save_workflow(wf: Workflow, path: Path | str) -> None:
    atomic_write_text(Path(path), dumps_workflow(wf))
