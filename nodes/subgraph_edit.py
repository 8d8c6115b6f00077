"""The editor's graph model with subgraphs: the canvas shows one level (the root graph or a definition's inner
graph, opened from an instance), while saves and runs see the whole workflow.

Lives here: `Level`, `NestedGraphModel`. Imports `nodes.graph_model`, `nodes.registry`, `nodes.subgraph`,
`nodes.subgraph_spec`, `nodes.subgraph_blueprint` (merging pasted definitions), `nodes.workflow`. No Qt (app/gui/subgraph_*.py wraps these calls in undo commands).

`NestedGraphModel.workflow` is the level on the canvas, so every existing edit (add, wire, move, set a
param...) edits it unchanged; an edit inside an opened subgraph changes its definition, which every instance
shares. `to_workflow()` folds the open levels back into the root (`nodes.subgraph.set_definition_workflow`),
so Save, Run and the autosave never see a half-edited copy. Opening and leaving a level are model calls too
(`enter`, `leave`), so the editor can keep them on its undo stack: an undone edit always finds the level it
was made on.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodes.graph_model import GraphModel
from nodes.registry import NodeRegistry
from nodes.spec import NodeSpec
from nodes.subgraph import definition_workflow, demote_widget, promote_widget, set_definition_workflow
from nodes.subgraph_blueprint import merge_definitions, used_definitions
from nodes.subgraph_spec import SubgraphRegistry
from nodes.workflow import Workflow


@dataclass
class Level:
    """One opened subgraph: the definition shown, the graph around it as it was when opened (`outer`, its
    definition refreshed from the canvas when the level is left or folded) and the instance opened."""

    def_id: str
    outer: Workflow
    instance: str
    title: str


class _MemoRegistry(SubgraphRegistry):
    """A SubgraphRegistry that builds each definition's spec once (the canvas asks for specs per paint)."""

    def __init__(self, base: NodeRegistry, definitions: dict[str, Any]) -> None:
        super().__init__(base, definitions)
        self._memo: dict[str, NodeSpec | None] = {}

    def get(self, type_name: str) -> NodeSpec | None:
        if type_name not in self._memo:
            self._memo[type_name] = super().get(type_name)
        return self._memo[type_name]


class NestedGraphModel(GraphModel):
    """A GraphModel whose registry knows the shown level's subgraph definitions, with open/leave levels."""

    def __init__(self, registry: NodeRegistry, workflow: Workflow | None = None) -> None:
        self._stack: list[Level] = []
        self._live: _MemoRegistry | None = None
        self._live_for: object = None
        super().__init__(registry, workflow)

    # -- the registry follows the definitions of the level shown -----------------------------------

    @property
    def registry(self) -> NodeRegistry:  # type: ignore[override]
        subgraphs = self.workflow.subgraphs if hasattr(self, "workflow") else {}
        if self._live is None or self._live_for is not subgraphs:
            # Definitions never change in place (every subgraph edit is a new workflow): identity is enough.
            self._live, self._live_for = _MemoRegistry(self.base_registry, subgraphs), subgraphs
        return self._live

    @registry.setter
    def registry(self, value: NodeRegistry) -> None:
        self.base_registry = value.base if isinstance(value, SubgraphRegistry) else value
        self._live = None

    # -- levels -----------------------------------------------------------------------------------

    def depth(self) -> int:
        return len(self._stack)

    def levels(self) -> list[Level]:
        return list(self._stack)

    def current_definition(self) -> str | None:
        return self._stack[-1].def_id if self._stack else None

    def _show(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self._ensure_ui()
        self._notify("reset")

    def load(self, workflow: Workflow) -> None:
        """Open a file or New: back at the root, whatever was open."""
        self._stack = []
        super().load(workflow)

    def enter(self, instance_id: str) -> None:
        """Show the inner graph of the definition `instance_id` is an instance of."""
        node = self.workflow.nodes.get(instance_id)
        if node is None or node.type not in self.workflow.subgraphs:
            raise ValueError(f"{instance_id!r} is not a subgraph instance")
        d = self.workflow.subgraphs[node.type]
        title = str(
            self.workflow.ui["nodes"].get(instance_id, {}).get("title") or d.get("title") or node.type
        )
        self._stack.append(Level(node.type, self.workflow, instance_id, title))
        self._show(definition_workflow(self.workflow, node.type))

    def leave(self, levels: int = 1) -> list[str]:
        """Back out `levels` levels, writing each inner graph into its definition; returns the instance ids
        left (outermost first), so `enter` can open them again."""
        left: list[str] = []
        inner = self.workflow
        for _ in range(min(levels, len(self._stack))):
            level = self._stack.pop()
            inner = set_definition_workflow(level.outer, level.def_id, inner)
            left.insert(0, level.instance)
        if left:
            self._show(inner)
        return left

    def replace(self, workflow: Workflow) -> None:
        """The shown level becomes `workflow` (a subgraph edit, or its undo)."""
        self._show(workflow.copy())

    def parent_workflow(self) -> Workflow:
        """The graph around the open subgraph, with the definition as the canvas has it now."""
        level = self._stack[-1]
        return set_definition_workflow(level.outer, level.def_id, self.workflow)

    def set_parent_workflow(self, outer: Workflow) -> None:
        """Replace the graph around the open subgraph (a promoted widget changes the definition's instances,
        one taken off gives its value back to the inner node); the canvas shows the inner graph it holds."""
        level = self._stack[-1]
        level.outer = outer.copy()
        self._show(definition_workflow(level.outer, level.def_id))

    def promoted(self) -> set[tuple[str, str]]:
        """(inner node, param) pairs of the open definition shown on its instances."""
        if not self._stack:
            return set()
        d = self._stack[-1].outer.subgraphs.get(self._stack[-1].def_id, {})
        return {(w["node"], w["param"]) for w in d.get("widgets", [])}

    def promote(self, node_id: str, param: str) -> Workflow:
        """The graph around the open subgraph with `node_id.param` shown on its instances (not applied)."""
        outer = self.parent_workflow()
        return promote_widget(outer, self.registry_for(outer), self._stack[-1].def_id, node_id, param)

    def new_id(self, type_name: str, taken: Iterable[str] = ()) -> str:
        """A subgraph instance is named after its definition's title ("prompts_2"), never its id: a "/" in a
        node id would read as a path into a subgraph (`nodes.subgraph.expand_subgraphs` names "inst/inner")."""
        d = self.workflow.subgraphs.get(type_name)
        if d is not None:
            type_name = (
                re.sub(r"[^a-z0-9]+", "_", str(d.get("title") or "subgraph").lower()).strip("_") or "subgraph"
            )
        return super().new_id(type_name, taken)

    # -- copy and paste carry the definitions their instances need ---------------------------------

    def snapshot(
        self,
        node_ids: Iterable[str],
        group_indices: Iterable[int] = (),
        inputs: Iterable[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        out = super().snapshot(node_ids, group_indices, inputs)
        defs = self.workflow.subgraphs
        used = [raw["type"] for raw in out["nodes"].values() if raw["type"] in defs]
        if used:
            out["subgraphs"] = {k: copy.deepcopy(defs[k]) for d in used for k in used_definitions(defs, d)}
        return out

    def _with_definitions(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """Merge a snapshot's definitions into the shown level (into another file, they may be new there);
        returns the snapshot with its instances pointing at the merged ids."""
        incoming = snapshot.get("subgraphs")
        if not isinstance(incoming, dict) or not incoming:
            return snapshot
        merged, renamed = merge_definitions(self.workflow.subgraphs, incoming, set(self.workflow.nodes))
        self.workflow.subgraphs = merged  # a new dict: the registry rebuilds
        snapshot = copy.deepcopy(snapshot)
        for raw in snapshot.get("nodes", {}).values():
            if isinstance(raw, dict) and raw.get("type") in renamed:
                raw["type"] = renamed[raw["type"]]
        return snapshot

    def paste(self, snapshot: dict[str, Any], offset: tuple[float, float] = (40.0, 40.0)) -> list[str]:
        return super().paste(self._with_definitions(snapshot), offset)

    def restore(self, snapshot: dict[str, Any]) -> None:
        super().restore(self._with_definitions(snapshot))

    def demote(self, node_id: str, param: str) -> Workflow:
        """The graph around the open subgraph with `node_id.param` taken off its instances (not applied)."""
        return demote_widget(self.parent_workflow(), self._stack[-1].def_id, node_id, param)

    def registry_for(self, wf: Workflow) -> NodeRegistry:
        return SubgraphRegistry(self.base_registry, wf.subgraphs) if wf.subgraphs else self.base_registry

    def root_workflow(self) -> Workflow:
        wf = self.workflow
        for level in reversed(self._stack):
            wf = set_definition_workflow(level.outer, level.def_id, wf)
        return wf.copy() if wf is self.workflow else wf

    def to_workflow(self) -> Workflow:
        """The whole workflow as it stands (open levels folded back), for saving or running."""
        return self.root_workflow()
