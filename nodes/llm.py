"""LLM nodes (filled in by the LLM work)."""

from nodes.spec import NodeSpec

NODES: list[NodeSpec] = []
