"""ComfyUI's cfg is `neg + cfg * (pos - neg)`; Z-Image's and Krea 2's pipelines guide as `pos + g * (pos - neg)`.

So ComfyUI's cfg 1 (no guidance, one model call a step) is their guidance 0: the importer subtracts the family's
offset (`Family.comfy_cfg_offset`) and notes it, and the export adds it back (a round trip keeps ComfyUI's value).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodes.comfy.export import export_api
from nodes.comfy.sources import import_comfy_data
from nodes.workflow import workflow_from_dict


def _template(name: str) -> Any:
    pytest.importorskip("comfyui_workflow_templates_json")
    from benchmarks.comfy_templates import templates_folder

    return json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))


def _samplers(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(nid, n) for nid, n in workflow["nodes"].items() if n["type"] in ("Sampler", "SamplerAdvanced")]


@pytest.mark.parametrize(
    ("name", "family"), [("image_z_image_turbo", "zimage"), ("image_krea2_turbo_t2i", "krea2")]
)
def test_comfy_cfg_1_is_no_guidance_and_exports_back(name: str, family: str, registry) -> None:
    result = import_comfy_data(_template(name), registry, name, title=name)
    [(nid, sampler)] = _samplers(result.workflow)
    assert sampler["params"]["cfg"] == 0.0  # the templates' cfg 1
    notes = [str(n) for n in result.notes if "cfg 1 is " in str(n)]
    assert notes and f"{family}'s guidance 0" in notes[0], [str(n) for n in result.notes]
    prompt = export_api(workflow_from_dict(result.workflow, registry), registry)
    cfgs = [n["inputs"]["cfg"] for n in prompt.values() if "cfg" in n["inputs"]]
    assert cfgs == [1.0]


def test_other_families_keep_comfy_cfg(registry) -> None:
    # Qwen-Image's cfg is neg + cfg * (pos - neg) as ComfyUI's: the number stays; the rule (diffusers' norm
    # rescale or not) is the sampler's cfg_rule (tests/test_qwenimage_comfy_cfg.py).
    name = "image_qwen_Image_2512"
    data = _template(name)
    result = import_comfy_data(data, registry, name, title=name)
    [(_, sampler)] = _samplers(result.workflow)
    theirs = [
        n["widgets_values"][3]
        for n in [
            *data["nodes"],
            *(x for sg in data.get("definitions", {}).get("subgraphs", []) for x in sg["nodes"]),
        ]
        if n.get("type") == "KSampler"
    ]
    assert sampler["params"]["cfg_rule"] == "comfyui"
    assert sampler["params"]["cfg"] == theirs[0] and not any(
        "cfg" in str(n) and "guidance" in str(n) for n in result.notes
    )
