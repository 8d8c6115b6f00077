"""Diffusion nodes (filled in by the diffusion work)."""

from nodes.spec import NodeSpec

NODES: list[NodeSpec] = []
