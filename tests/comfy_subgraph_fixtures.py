"""Tiny ComfyUI UI-format files with subgraphs, as ComfyUI's 2026 templates are saved (definitions.subgraphs,
object links inside, -10/-20 boundary nodes), built in memory for the subgraph tests.

Lives here: `prompts_subgraph_file` (one "Prompts" subgraph: two text encodes), `shared_encode_file` (two
instances of one "Encode" subgraph), `prompt_widget_file` (two instances of an "Encode" subgraph whose prompt is
a widget on the instance, as ComfyUI's templates show it); `run_signatures` (a graph's nodes without their ids,
to compare what two graphs run). Imports nothing from Nodeloom at run time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.workflow import Workflow

SUB_PROMPTS = "5d1e8a3c-0000-4aaa-9bbb-000000000001"
SUB_ENCODE = "5d1e8a3c-0000-4aaa-9bbb-000000000002"


def _link(link_id: int, origin: int, slot: int, target: int, target_slot: int, kind: str) -> dict[str, Any]:
    return {
        "id": link_id,
        "origin_id": origin,
        "origin_slot": slot,
        "target_id": target,
        "target_slot": target_slot,
        "type": kind,
    }


def _encode(node_id: int, text: str, link_in: int, link_out: int, pos: list[float]) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": "CLIPTextEncode",
        "pos": pos,
        "inputs": [{"name": "clip", "type": "CLIP", "link": link_in}],
        "outputs": [{"name": "CONDITIONING", "type": "CONDITIONING", "links": [link_out]}],
        "widgets_values": [text],
    }


def _outer(instances: list[dict[str, Any]], links: list[list[Any]], subgraphs: list[dict]) -> dict[str, Any]:
    nodes = [
        {
            "id": 4,
            "type": "CheckpointLoaderSimple",
            "pos": [0, 0],
            "inputs": [],
            "outputs": [
                {"name": "MODEL", "type": "MODEL", "links": [1]},
                {"name": "CLIP", "type": "CLIP", "links": [3, 6]},
                {"name": "VAE", "type": "VAE", "links": [8]},
            ],
            "widgets_values": ["demo.safetensors"],
        },
        {
            "id": 5,
            "type": "EmptyLatentImage",
            "pos": [0, 300],
            "inputs": [],
            "outputs": [{"name": "LATENT", "type": "LATENT", "links": [2]}],
            "widgets_values": [64, 64, 1],
        },
        {
            "id": 3,
            "type": "KSampler",
            "pos": [700, 0],
            "inputs": [
                {"name": "model", "type": "MODEL", "link": 1},
                {"name": "positive", "type": "CONDITIONING", "link": 4},
                {"name": "negative", "type": "CONDITIONING", "link": 5},
                {"name": "latent_image", "type": "LATENT", "link": 2},
            ],
            "outputs": [{"name": "LATENT", "type": "LATENT", "links": [7]}],
            "widgets_values": [42, "fixed", 2, 7.0, "euler", "normal", 1.0],
        },
        {
            "id": 8,
            "type": "VAEDecode",
            "pos": [1000, 0],
            "inputs": [
                {"name": "samples", "type": "LATENT", "link": 7},
                {"name": "vae", "type": "VAE", "link": 8},
            ],
            "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [9]}],
            "widgets_values": [],
        },
        {
            "id": 9,
            "type": "SaveImage",
            "pos": [1250, 0],
            "inputs": [{"name": "images", "type": "IMAGE", "link": 9}],
            "outputs": [],
            "widgets_values": ["ComfyUI"],
        },
        *instances,
    ]
    return {
        "version": 0.4,
        "nodes": nodes,
        "links": [
            [1, 4, 0, 3, 0, "MODEL"],
            [2, 5, 0, 3, 3, "LATENT"],
            [7, 3, 0, 8, 0, "LATENT"],
            [8, 4, 2, 8, 1, "VAE"],
            [9, 8, 0, 9, 0, "IMAGE"],
            *links,
        ],
        "definitions": {"subgraphs": subgraphs},
    }


def prompts_subgraph_file() -> dict[str, Any]:
    """txt2img whose two prompts sit in one subgraph "Prompts" (input clip; outputs positive, negative)."""
    sub = {
        "id": SUB_PROMPTS,
        "name": "Prompts",
        "inputs": [{"id": "in-0", "name": "clip", "type": "CLIP", "linkIds": [101, 102]}],
        "outputs": [
            {"id": "out-0", "name": "positive", "type": "CONDITIONING", "linkIds": [103]},
            {"id": "out-1", "name": "negative", "type": "CONDITIONING", "linkIds": [104]},
        ],
        "nodes": [
            _encode(1, "a red square", 101, 103, [100, 100]),
            _encode(2, "blurry", 102, 104, [100, 300]),
        ],
        "links": [
            _link(101, -10, 0, 1, 0, "CLIP"),
            _link(102, -10, 0, 2, 0, "CLIP"),
            _link(103, 1, 0, -20, 0, "CONDITIONING"),
            _link(104, 2, 0, -20, 1, "CONDITIONING"),
        ],
    }
    instance = {
        "id": 10,
        "type": SUB_PROMPTS,
        "pos": [350, 0],
        "inputs": [{"name": "clip", "type": "CLIP", "link": 3}],
        "outputs": [
            {"name": "positive", "type": "CONDITIONING", "links": [4]},
            {"name": "negative", "type": "CONDITIONING", "links": [5]},
        ],
        "widgets_values": [],
    }
    links = [[3, 4, 1, 10, 0, "CLIP"], [4, 10, 0, 3, 1, "CONDITIONING"], [5, 10, 1, 3, 2, "CONDITIONING"]]
    data = _outer([instance], links, [sub])
    data["nodes"][0]["outputs"][1]["links"] = [3]
    return data


def shared_encode_file() -> dict[str, Any]:
    """Two instances (positive, negative) of one subgraph "Encode": a text encode with the same text."""
    sub = {
        "id": SUB_ENCODE,
        "name": "Encode",
        "inputs": [{"id": "in-0", "name": "clip", "type": "CLIP", "linkIds": [101]}],
        "outputs": [{"id": "out-0", "name": "conditioning", "type": "CONDITIONING", "linkIds": [102]}],
        "nodes": [_encode(1, "a red square", 101, 102, [100, 100])],
        "links": [_link(101, -10, 0, 1, 0, "CLIP"), _link(102, 1, 0, -20, 0, "CONDITIONING")],
    }

    def instance(node_id: int, link_in: int, link_out: int, y: float) -> dict[str, Any]:
        return {
            "id": node_id,
            "type": SUB_ENCODE,
            "pos": [350, y],
            "inputs": [{"name": "clip", "type": "CLIP", "link": link_in}],
            "outputs": [{"name": "conditioning", "type": "CONDITIONING", "links": [link_out]}],
            "widgets_values": [],
        }

    links = [
        [3, 4, 1, 10, 0, "CLIP"],
        [6, 4, 1, 11, 0, "CLIP"],
        [4, 10, 0, 3, 1, "CONDITIONING"],
        [5, 11, 0, 3, 2, "CONDITIONING"],
    ]
    return _outer([instance(10, 3, 4, 0), instance(11, 6, 5, 250)], links, [sub])


def prompt_widget_file() -> dict[str, Any]:
    """Two instances of "Encode" whose text is a STRING subgraph input set by each instance's own widget."""
    data = shared_encode_file()
    sub = data["definitions"]["subgraphs"][0]
    sub["inputs"].append({"id": "in-1", "name": "text", "type": "STRING", "linkIds": [103]})
    encode = sub["nodes"][0]
    encode["inputs"].append({"name": "text", "type": "STRING", "widget": {"name": "text"}, "link": 103})
    sub["links"].append(_link(103, -10, 1, 1, 1, "STRING"))
    for node, text in zip(data["nodes"][-2:], ("a red square", "blurry"), strict=True):
        node["widgets_values"] = [text]  # one per widget-typed subgraph input
    return data


def run_signatures(wf: Workflow) -> list[str]:
    """Each node as its type, values and (recursively) what feeds each input, ids left out: two graphs with
    the same signatures run the same nodes on the same inputs."""
    memo: dict[str, str] = {}

    def sig(nid: str) -> str:
        if nid not in memo:
            node = wf.nodes[nid]
            feeds = {port: [sig(link.node), link.output] for port, link in sorted(node.inputs.items())}
            memo[nid] = json.dumps([node.type, node.params, feeds], sort_keys=True, default=str)
        return memo[nid]

    return sorted(sig(nid) for nid in wf.nodes)
