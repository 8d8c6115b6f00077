"""ComfyUI's Anima template is reported as a family Nodeloom cannot run: its CLIPLoader's type is
"stable_diffusion" (a Qwen3 0.6B encoder loaded as SD's), which alone read as SD 1.5, but its diffusion model file
names Anima. Skipped without ComfyUI's template package."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json")

from benchmarks.comfy_templates import templates_folder  # noqa: E402
from nodes.comfy.sources import import_comfy_data  # noqa: E402


def test_the_anima_template_names_its_family(registry) -> None:
    name = "image_anima_preview"
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    problems = import_comfy_data(data, registry, name, title=name).families
    assert [(p.class_type, p.family) for p in problems] == [("UNETLoader", "anima")]
    assert "anima-preview3-base.safetensors" in problems[0].message
