"""A subgraph instance's widget values as ComfyUI's 2026 frontend saves them: one per widget-typed subgraph
input (INT, FLOAT, STRING, BOOLEAN, COMBO), a wired one's included, none for socket-only inputs (IMAGE,
MODEL, ...); the instance lists only the sockets it shows, matched to the subgraph's inputs by name (the
published FLUX.2 klein edit and LongCat templates are saved so)."""

from __future__ import annotations

from nodes.comfy.sources import import_comfy_data
from tests.comfy_ids import by_comfy_id

SUB = "aaaaaaaa-1111-4aaa-9bbb-222233334444"


def _file() -> dict:
    inputs = [
        ("ckpt", "COMBO", [201]),
        ("image", "IMAGE", [202]),
        ("width", "INT", [203]),
        ("prefix", "STRING", [204]),
    ]
    sub = {
        "id": SUB,
        "name": "Inner",
        "inputs": [
            {"id": f"in-{i}", "name": n, "type": t, "linkIds": ids} for i, (n, t, ids) in enumerate(inputs)
        ],
        "outputs": [],
        "nodes": [
            {
                "id": 1,
                "type": "CheckpointLoaderSimple",
                "inputs": [
                    {"name": "ckpt_name", "type": "COMBO", "widget": {"name": "ckpt_name"}, "link": 201}
                ],
                "outputs": [],
                "widgets_values": ["inner.safetensors"],
            },
            {
                "id": 2,
                "type": "ImageScale",
                "inputs": [
                    {"name": "image", "type": "IMAGE", "link": 202},
                    {"name": "width", "type": "INT", "widget": {"name": "width"}, "link": 203},
                ],
                "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [205]}],
                "widgets_values": ["area", 64, 64, "disabled"],
            },
            {
                "id": 3,
                "type": "SaveImage",
                "inputs": [
                    {"name": "images", "type": "IMAGE", "link": 205},
                    {
                        "name": "filename_prefix",
                        "type": "STRING",
                        "widget": {"name": "filename_prefix"},
                        "link": 204,
                    },
                ],
                "outputs": [],
                "widgets_values": ["inner"],
            },
        ],
        "links": [
            {
                "id": 201,
                "origin_id": -10,
                "origin_slot": 0,
                "target_id": 1,
                "target_slot": 0,
                "type": "COMBO",
            },
            {
                "id": 202,
                "origin_id": -10,
                "origin_slot": 1,
                "target_id": 2,
                "target_slot": 0,
                "type": "IMAGE",
            },
            {"id": 203, "origin_id": -10, "origin_slot": 2, "target_id": 2, "target_slot": 1, "type": "INT"},
            {
                "id": 204,
                "origin_id": -10,
                "origin_slot": 3,
                "target_id": 3,
                "target_slot": 1,
                "type": "STRING",
            },
            {"id": 205, "origin_id": 2, "origin_slot": 0, "target_id": 3, "target_slot": 0, "type": "IMAGE"},
        ],
    }
    return {
        "version": 0.4,
        "nodes": [
            {
                "id": 7,
                "type": "LoadImage",
                "inputs": [],
                "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [1]}],
                "widgets_values": ["in.png", "image"],
            },
            {
                "id": 8,
                "type": "PrimitiveInt",
                "inputs": [],
                "outputs": [{"name": "INT", "type": "INT", "links": [2]}],
                "widgets_values": [96, "fixed"],
            },
            # Shows two sockets, in its own order; three widget values for the three widget-typed inputs
            # (ckpt, width, prefix), the wired width's kept but not used.
            {
                "id": 9,
                "type": SUB,
                "inputs": [
                    {"name": "width", "type": "INT", "link": 2},
                    {"name": "image", "type": "IMAGE", "link": 1},
                ],
                "outputs": [],
                "widgets_values": ["outer.safetensors", 512, "shots"],
            },
        ],
        "links": [[1, 7, 0, 9, 1, "IMAGE"], [2, 8, 0, 9, 0, "INT"]],
        "definitions": {"subgraphs": [sub]},
    }


def test_instance_widgets_go_to_their_inputs_by_type_and_sockets_by_name(registry) -> None:
    result = import_comfy_data(_file(), registry, "sub.json", title="sub")
    nodes = by_comfy_id(result.workflow)
    assert nodes["9:1"]["params"]["path"] == "outer.safetensors"
    assert nodes["9:2"]["inputs"] == {"image": ["7", "image"]}
    assert nodes["9:2"]["params"]["width"] == 96  # the wired primitive's, not the stored 512
    assert nodes["9:3"]["params"]["prefix"] == "shots"
    assert result.unsupported == []
