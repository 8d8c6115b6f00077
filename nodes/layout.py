"""A layered layout by data flow, for graphs that come without positions (ComfyUI API-format imports).

Lives here: `NODE_SIZE`, `layered_layout`. Pure Python; imports nothing from Nodeloom.

Each node goes in the column of its longest path from a source (so every wire runs left to right), and
within a column nodes are ordered by the mean row of the nodes that feed them (fewer crossings), then by
their order in the graph. Columns are as wide as their widest node plus a gap, rows as tall as each node
plus a gap, so no two nodes overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

NODE_SIZE = (240.0, 140.0)  # a typical node's width and height in the editor, in scene units
_GAP_X, _GAP_Y = 80.0, 40.0


def _columns(order: Sequence[str], sources: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Longest path from a source, by iteration (a cycle, which validation refuses, stops at len(order))."""
    column = dict.fromkeys(order, 0)
    for _ in range(len(order)):
        changed = False
        for node in order:
            for source in sources.get(node, ()):
                if source in column and source != node and column[source] + 1 > column[node]:
                    column[node] = min(column[source] + 1, len(order))
                    changed = True
        if not changed:
            break
    return column


def layered_layout(
    order: Sequence[str],
    sources: Mapping[str, Sequence[str]],
    sizes: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, tuple[float, float]]:
    """Top-left positions for the nodes in `order`; `sources[n]` lists the nodes wired into n."""
    sizes = sizes or {}
    column = _columns(order, sources)
    by_column: dict[int, list[str]] = {}
    for node in order:
        by_column.setdefault(column[node], []).append(node)
    row: dict[str, float] = {}
    positions: dict[str, tuple[float, float]] = {}
    x = 0.0
    rank = {node: i for i, node in enumerate(order)}
    for c in sorted(by_column):
        nodes = by_column[c]

        def weight(node: str) -> tuple[float, int]:
            fed_by = [row[s] for s in sources.get(node, ()) if s in row]
            return (sum(fed_by) / len(fed_by) if fed_by else float(rank[node]), rank[node])

        nodes.sort(key=weight)
        y = 0.0
        for i, node in enumerate(nodes):
            width, height = sizes.get(node, NODE_SIZE)
            positions[node] = (x, y)
            row[node] = float(i)
            y += height + _GAP_Y
        x += max(sizes.get(n, NODE_SIZE)[0] for n in nodes) + _GAP_X
    return positions
