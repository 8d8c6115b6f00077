"""Subgraph definitions as node types: the spec a definition gives its instances, and a registry that knows them.

Lives here: `SubgraphRegistry` (a registry plus one workflow's definitions), `with_subgraphs`, `definition_spec`,
`definition_problems`, `SUBGRAPH_CATEGORY`. Imports `nodes.registry`, `nodes.spec`, `nodes.types` (and
`nodes.workflow` for type hints only: `nodes.workflow` imports this module).

A workflow's `subgraphs` maps a definition id to a definition (plain JSON, saved as is):

    {"title": "Prompt pair", "nodes": {<inner nodes, as in the workflow's "nodes">},
     "ui": {"nodes": {<inner positions>}},
     "inputs": [{"name": "clip", "targets": [["pos", "clip"], ["neg", "clip"]]}],
     "outputs": [{"name": "positive", "source": ["pos", "conditioning"]}],
     "widgets": [{"name": "pos.text", "node": "pos", "param": "text"}]}

An instance is a node whose `type` is the definition id (as in ComfyUI, where an instance's type is its
subgraph's id): its inputs are the definition's inputs, its outputs the definition's outputs and its params
the promoted widgets. Port types come from the inner ports they stand for, so typed-wire checks hold across
the boundary. Before a run, instances are expanded into plain nodes (`nodes.subgraph.expand_subgraphs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nodes.registry import NodeRegistry
from nodes.spec import Input, NodeSpec, Output
from nodes.types import ANY, PortType

if TYPE_CHECKING:
    from nodes.problems import Problem
    from nodes.workflow import Workflow

SUBGRAPH_CATEGORY = "subgraphs"
MAX_NESTING = 8  # a definition whose instance sits inside itself would recurse forever; real ones nest 1-2


def _never_runs(**_: Any) -> dict[str, Any]:
    raise RuntimeError("a subgraph instance is expanded into its nodes before a run")


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(x, str) for x in value)


def definition_problems(source: str, def_id: str, d: Any) -> list[Problem]:
    """Every shape problem of one definition, each naming it (`subgraphs.<id>.<field>`)."""
    from nodes.problems import Problem

    def bad(where: str, reason: str) -> Problem:
        return Problem(source, None, f"subgraphs.{def_id}.{where}", reason)

    if not isinstance(d, dict):
        return [bad("", "a subgraph definition is an object")]
    out: list[Problem] = []
    nodes = d.get("nodes")
    if not isinstance(nodes, dict) or not all(isinstance(n, dict) for n in nodes.values()):
        out.append(bad("nodes", "expected an object of inner nodes keyed by id"))
        nodes = {}
    for i, entry in enumerate(d.get("inputs", [])):
        targets = entry.get("targets") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("name"), str)
            or not isinstance(targets, list)
        ):
            out.append(bad(f"inputs.{i}", 'an input is {"name": ..., "targets": [[node, port], ...]}'))
        elif not all(_is_pair(t) and t[0] in nodes for t in targets):
            out.append(bad(f"inputs.{i}", f"a target of input {entry['name']!r} is not [inner node, port]"))
    for i, entry in enumerate(d.get("outputs", [])):
        src = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not _is_pair(src):
            out.append(bad(f"outputs.{i}", 'an output is {"name": ..., "source": [node, output]}'))
        elif src[0] not in nodes:
            out.append(
                bad(f"outputs.{i}", f"output {entry['name']!r} comes from {src[0]!r}, not an inner node")
            )
    for i, entry in enumerate(d.get("widgets", [])):
        ok = isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in ("name", "node", "param"))
        if not ok or entry["node"] not in nodes:
            out.append(bad(f"widgets.{i}", 'a widget is {"name": ..., "node": <inner node>, "param": ...}'))
    return out


def _input_type(spec: NodeSpec | None, port: str) -> PortType:
    if spec is None:
        return ANY
    declared = spec.input(port)
    if declared is not None:
        return declared.type
    param = spec.param(port)
    return param.kind.port_type if param is not None else ANY


def definition_spec(def_id: str, d: dict[str, Any], registry: NodeRegistry) -> NodeSpec:
    """The node type an instance of definition `d` is: its ports and promoted widgets."""
    inner = d.get("nodes", {})

    def inner_spec(node_id: str) -> NodeSpec | None:
        node = inner.get(node_id)
        return registry.get(node.get("type", "")) if isinstance(node, dict) else None

    inputs = [
        Input(
            e["name"],
            _input_type(inner_spec(e["targets"][0][0]), e["targets"][0][1]) if e["targets"] else ANY,
            help=f"Goes to {', '.join(f'{n}.{p}' for n, p in e['targets'])} inside.",
            optional=True,
        )
        for e in d.get("inputs", [])
    ]
    outputs = []
    for e in d.get("outputs", []):
        spec = inner_spec(e["source"][0])
        out = spec.output(e["source"][1]) if spec is not None else None
        outputs.append(
            Output(
                e["name"],
                out.type if out is not None else ANY,
                help=f"{e['source'][0]}.{e['source'][1]} inside.",
            )
        )
    params = []
    for e in d.get("widgets", []):
        spec = inner_spec(e["node"])
        param = spec.param(e["param"]) if spec is not None else None
        if param is not None:
            value = inner[e["node"]].get("params", {}).get(e["param"], param.default)
            params.append(dataclasses.replace(param, name=e["name"], default=value))
    return NodeSpec(
        type=def_id,
        title=str(d.get("title") or def_id),
        category=SUBGRAPH_CATEGORY,
        run=_never_runs,
        inputs=inputs,
        outputs=outputs,
        params=params,
        description=f"A subgraph of {len(inner)} node{'s' if len(inner) != 1 else ''}; open it to edit them.",
        is_output=any((s := inner_spec(n)) is not None and s.is_output for n in inner),
        tags=("subgraph",),
    )


class SubgraphRegistry(NodeRegistry):
    """`base`'s node types plus one node type per well-formed definition of a workflow (built on lookup)."""

    def __init__(self, base: NodeRegistry, definitions: dict[str, Any], depth: int = 0) -> None:
        super().__init__()
        self.base = base
        self.load_errors = base.load_errors
        self._defs = {
            k: v for k, v in definitions.items() if not definition_problems("", k, v) and base.get(k) is None
        }
        self._depth = depth

    def get(self, type_name: str) -> NodeSpec | None:
        spec = self.base.get(type_name)
        if spec is not None or type_name not in self._defs or self._depth >= MAX_NESTING:
            return spec
        # Inner nodes may be instances of other definitions of the same workflow.
        inner = SubgraphRegistry(self.base, self._defs, self._depth + 1)
        return definition_spec(type_name, self._defs[type_name], inner)

    def __getitem__(self, type_name: str) -> NodeSpec:
        spec = self.get(type_name)
        if spec is None:
            raise KeyError(type_name)
        return spec

    def __contains__(self, type_name: object) -> bool:
        return type_name in self.base or type_name in self._defs

    def __iter__(self) -> Iterator[NodeSpec]:
        yield from self.base
        for def_id in self._defs:
            spec = self.get(def_id)
            if spec is not None:
                yield spec

    def __len__(self) -> int:
        return len(self.base) + len(self._defs)

    def categories(self) -> dict[str, list[NodeSpec]]:
        out: dict[str, list[NodeSpec]] = {}
        for spec in sorted(self, key=lambda s: (s.category, s.title)):
            out.setdefault(spec.category, []).append(spec)
        return out


def with_subgraphs(registry: NodeRegistry, wf: Workflow) -> NodeRegistry:
    """`registry` as it reads `wf`: with its subgraph definitions as node types (itself when there are none)."""
    base = registry.base if isinstance(registry, SubgraphRegistry) else registry
    return SubgraphRegistry(base, wf.subgraphs) if wf.subgraphs else base
