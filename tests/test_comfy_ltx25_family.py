"""LTX-2.5's ComfyUI templates are reported as a family Nodeloom cannot run: their text encoder is a Gemma 4
file, which our LTX-2 family (Gemma 3) does not load, though the transformer's name reads as LTX-2. The LTX-2.3
templates (Gemma 3) stay runnable. Skipped without ComfyUI's template package."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json")

from benchmarks.comfy_templates import templates_folder  # noqa: E402
from nodes.comfy.sources import import_comfy_data  # noqa: E402
from nodes.registry import default_registry  # noqa: E402


def _families(name: str) -> list:
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    return import_comfy_data(data, default_registry(entry_point_packs=False), name, title=name).families


@pytest.mark.parametrize("name", ["video_ltx2_5_t2v", "video_ltx2_5_i2v"])
def test_ltx25_template_names_its_gemma4_text_encoder_loader(name: str) -> None:
    problems = _families(name)
    assert len(problems) == 1
    problem = problems[0]
    assert problem.class_type == "CLIPLoader" and problem.field == "clip_name"
    assert "LTX-2.5's Gemma 4 text encoder" in problem.message
    assert "gemma4-12b-with-proj-ltx-2.5" in problem.message  # the text encoder, not the prompt-enhancer LLM


@pytest.mark.parametrize("name", ["video_ltx2_3_t2v", "video_ltx2_3_i2v"])
def test_ltx23_templates_stay_runnable(name: str) -> None:
    assert _families(name) == []
