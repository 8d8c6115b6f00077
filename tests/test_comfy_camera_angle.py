"""ComfyUI's CameraAngle resolves at import to its shot description (nodes/comfy/mapping_camera.py): the terms at
ComfyUI's thresholds, the Qwen-Image-Edit multiple-angles template imports and checks clean with the text in
its prompt, and a wired angle stays unsupported. The template test skips without ComfyUI's template package."""

from __future__ import annotations

import json

import pytest

from nodes.comfy.mapping_camera import camera_prompt
from nodes.comfy.sources import check_comfy, import_comfy_data
from nodes.registry import default_registry


@pytest.fixture(scope="module")
def shared_registry():
    # read-only here: one registry (0.5 s to build) for the module's imports
    return default_registry(entry_point_packs=False)


@pytest.mark.parametrize(
    ("h", "v", "zoom", "expected"),
    [
        (0, 0, 5.0, "front view eye-level shot medium shot"),  # the defaults
        (22, -15, 1.9, "front view eye-level shot wide shot"),  # -15 is not below -15
        (23, -16, 2.0, "front-right quarter view low-angle shot medium shot"),
        (90, 14, 5.9, "right side view eye-level shot medium shot"),
        (135, 15, 6.0, "back-right quarter view elevated shot close-up"),
        (180, 44, 10.0, "back view elevated shot close-up"),
        (247, 45, 0.0, "back-left quarter view high-angle shot wide shot"),
        (248, 60, 0.0, "left side view high-angle shot wide shot"),
        (333, 17, 5.0, "front-left quarter view elevated shot medium shot"),  # the template's values
        (338, 0, 5.0, "front view eye-level shot medium shot"),  # the front sector wraps past 337.5
        (360, 0, 5.0, "front view eye-level shot medium shot"),
        (400, -90, 99.0, "front view low-angle shot close-up"),  # clamped to 360, -30, 10 first
        # ComfyUI's own unit test's cases (tests-unit, nodes_camera_angle)
        (0, -30, 0.0, "front view low-angle shot wide shot"),
        (0, -15, 2.0, "front view eye-level shot medium shot"),
        (0, 15, 6.0, "front view elevated shot close-up"),
        (0, 45, 10.0, "front view high-angle shot close-up"),
    ],
)
def test_camera_prompt_terms_follow_comfyuis_thresholds(h: int, v: int, zoom: float, expected: str) -> None:
    assert camera_prompt(h, v, zoom) == expected


def _api_graph(horizontal: object) -> dict:
    return {
        "1": {
            "class_type": "CameraAngle",
            "inputs": {"horizontal_angle": horizontal, "vertical_angle": 0, "zoom": 5.0},
        },
        "2": {"class_type": "PrimitiveInt", "inputs": {"value": 90}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}},
    }


def test_a_wired_angle_stays_unsupported_and_a_constant_one_maps(shared_registry) -> None:
    wired = import_comfy_data(_api_graph(["2", 0]), shared_registry, "wired.json", title="wired")
    assert [u.class_type for u in wired.unsupported] == ["CameraAngle"]
    constant = import_comfy_data(_api_graph(90), shared_registry, "constant.json", title="constant")
    assert constant.unsupported == []
    assert "right side view eye-level shot medium shot" in json.dumps(constant.workflow)


def test_the_multiangle_template_checks_clean_with_the_shot_in_its_prompt(shared_registry) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from benchmarks.comfy_templates import templates_folder

    name = "template_qwen_multiangle.app"
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    result = import_comfy_data(data, shared_registry, name, title=name)
    assert result.unsupported == [] and result.families == []
    assert check_comfy(result, shared_registry, name) == []
    prompts = [
        node["params"].get("prompt")
        for node in result.workflow["nodes"].values()
        if node["type"] == "TextEncodeQwenImageEditPlus"
    ]
    # CameraAngle 333 / 17 / 5 feeds the positive prompt; the negative one stays empty
    assert sorted(prompts) == ["", "front-left quarter view elevated shot medium shot"]
    notes = [n.message for n in result.notes if n.class_type == "CameraAngle"]
    assert notes == ["resolved at import to its prompt 'front-left quarter view elevated shot medium shot'"]
