"""Imported nodes only a resolved switch's unchosen branch needed: left out, as ComfyUI leaves them unrun.

Lives here: `drop_unused`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (the placeholder prefix) and
`nodes.registry` (which node types are outputs).

ComfyUI runs the output nodes and what they depend on, nothing else. A template's constant switch, resolved at
import (nodes/comfy/mapping_media.py), leaves the branch it did not choose feeding nothing: the 2026 templates'
"use the Lightning LoRA" switches leave a LoRA loader whose file the run never reads. Kept, that node would make
`app check` and the run ask for a file ComfyUI never opens. Only such branches are left out (a node that feeds no
output and fed a switch): other unconnected nodes stay, as the user drew them. A placeholder (an unsupported
ComfyUI node) counts as an output here, so what feeds an unsupported output node stays, and the check still
names that node.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph, LinkRef
from nodes.comfy.mapping import PLACEHOLDER_PREFIX
from nodes.registry import NodeRegistry


def _is_root(node: dict[str, Any], registry: NodeRegistry) -> bool:
    if node["type"].startswith(PLACEHOLDER_PREFIX):
        return True
    spec = registry.get(node["type"])
    return spec is None or spec.is_output


SWITCHES = ("ComfySwitchNode",)


def _switch_ancestors(graph: ComfyGraph) -> set[str]:
    """Every ComfyUI node a switch node depends on (through any of its inputs)."""
    seen: set[str] = set()
    stack = [nid for nid, node in graph.nodes.items() if node.class_type in SWITCHES]
    while stack:
        node = graph.nodes.get(stack.pop())
        for value in node.inputs.values() if node else ():
            if isinstance(value, LinkRef) and value.node not in seen:
                seen.add(value.node)
                stack.append(value.node)
    return seen


def drop_unused(
    nodes: dict[str, dict[str, Any]],
    registry: NodeRegistry,
    graph: ComfyGraph,
    keep: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """`nodes` less those no output node (nor placeholder) depends on that fed a switch; each left out is said.
    A workflow with no output at all is kept whole (the executor then runs every node). `keep`: ids that stay
    whatever feeds them (a text-encoder loader whose file a Load LLM the import added also reads: the export
    writes the two as that one loader again)."""
    roots = [nid for nid, node in nodes.items() if _is_root(node, registry)]
    if not roots:
        return nodes
    needed: set[str] = set()
    stack = list(roots)
    while stack:
        nid = stack.pop()
        if nid in needed or nid not in nodes:
            continue
        needed.add(nid)
        for link in nodes[nid].get("inputs", {}).values():
            if isinstance(link, list) and link and isinstance(link[0], str):
                stack.append(link[0])
    fed_switch = _switch_ancestors(graph)
    dropped = [nid for nid in nodes if nid not in needed and nid in fed_switch and nid not in keep]
    for nid in dropped:
        graph.note(
            graph.nodes.get(nid),
            f"{nodes[nid]['type']} fed only the switch's unchosen input (ComfyUI does not run it): left out",
        )
    return {nid: node for nid, node in nodes.items() if nid not in dropped}
