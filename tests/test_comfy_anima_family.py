"""ComfyUI's Anima and FLUX.1 Fill templates are reported as families Nodeloom cannot run. Anima's CLIPLoader type
is "stable_diffusion" (a Qwen3 0.6B encoder loaded as SD's), which alone read as SD 1.5, but its diffusion model
file names Anima; FLUX.1 Fill's transformer reads as FLUX.1, whose loop here takes no inpainting channels.
Skipped without ComfyUI's template package."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json")

from benchmarks.comfy_templates import templates_folder  # noqa: E402
from nodes.comfy.sources import import_comfy_data  # noqa: E402


@pytest.mark.parametrize(
    ("name", "family", "file"),
    [
        ("image_anima_preview", "anima", "anima-preview3-base.safetensors"),
        ("flux_fill_inpaint_example", "flux_fill", "flux1-fill-dev.safetensors"),
        (
            "image_flux.1_fill_dev_OneReward",
            "flux_fill",
            "flux.1-fill-dev-OneReward-transformer_fp8.safetensors",
        ),
    ],
)
def test_the_template_names_its_family(registry, name: str, family: str, file: str) -> None:
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    problems = import_comfy_data(data, registry, name, title=name).families
    assert [(p.class_type, p.family) for p in problems] == [("UNETLoader", family)]
    assert file in problems[0].message
