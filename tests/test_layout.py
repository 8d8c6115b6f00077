"""The layered layout (nodes/layout.py) and its use for ComfyUI API-format imports, which carry no
positions: no two nodes overlap and every wire runs left to right."""

from __future__ import annotations

import random

from nodes.comfy.sources import import_comfy_data
from nodes.layout import NODE_SIZE, layered_layout
from tests.test_comfy_check_json import SD15


def _overlap(a: tuple[float, float], b: tuple[float, float], size=NODE_SIZE) -> bool:
    return abs(a[0] - b[0]) < size[0] and abs(a[1] - b[1]) < size[1]


def _check(order: list[str], sources: dict[str, list[str]], pos: dict[str, tuple[float, float]]) -> None:
    assert set(pos) == set(order)
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            assert not _overlap(pos[a], pos[b]), (a, b, pos[a], pos[b])
    for node, feeding in sources.items():
        for source in feeding:
            assert pos[source][0] + NODE_SIZE[0] <= pos[node][0], (source, node)


def test_random_dags_lay_out_left_to_right_without_overlaps() -> None:
    rng = random.Random(7)
    for _ in range(30):
        order = [f"n{i}" for i in range(rng.randint(1, 25))]
        # Wires only from earlier to later nodes: a DAG, listed in a shuffled order.
        sources = {n: [order[j] for j in range(i) if rng.random() < 0.2] for i, n in enumerate(order)}
        shuffled = order[:]
        rng.shuffle(shuffled)
        _check(shuffled, sources, layered_layout(shuffled, sources))


def test_a_cycle_does_not_hang_the_layout() -> None:
    pos = layered_layout(["a", "b"], {"a": ["b"], "b": ["a"]})
    assert set(pos) == {"a", "b"} and not _overlap(pos["a"], pos["b"])


def test_an_api_import_gets_positions_by_data_flow(registry) -> None:
    result = import_comfy_data(SD15, registry, "sd15.json", title="sd15")
    nodes = result.workflow["nodes"]
    pos = {nid: tuple(entry["pos"]) for nid, entry in result.workflow["ui"]["nodes"].items()}
    sources = {nid: [link[0] for link in data["inputs"].values()] for nid, data in nodes.items()}
    _check(list(nodes), sources, pos)
    # loader, sampler, decode, save
    assert pos["load_checkpoint"][0] < pos["ksampler"][0] < pos["vae_decode"][0] < pos["save_image"][0]
