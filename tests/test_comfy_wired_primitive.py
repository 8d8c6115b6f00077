"""A primitive whose own widget is wired, inside a subgraph, shows what the wire brings (FLUX.3 klein's prompt).

`image_flux3_klein_t2i` keeps its prompt in the subgraph instance's promoted `positive_prompt` box, which feeds
an inner PrimitiveStringMultiline whose own widget is empty; that primitive feeds the prompt writer
(TextGenerate) and the text encoder. ComfyUI runs the wired value; the import once took the primitive's empty
widget, so LLM Generate refused an empty prompt. TextGenerate's newer `system_prompt` input (the upsampler's
instructions, another primitive) goes to LLM Generate's `system_prompt`.
"""

from __future__ import annotations

import json

import pytest

from nodes.comfy.sources import import_comfy_data
from nodes.registry import default_registry

pytest.importorskip("comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json")


def test_the_prompt_writer_gets_the_instance_prompt_and_its_system_prompt() -> None:
    from benchmarks.comfy_templates import templates_folder

    data = json.loads((templates_folder() / "image_flux3_klein_t2i.json").read_text(encoding="utf-8"))
    (instance,) = [n for n in data["nodes"] if n["type"] == data["definitions"]["subgraphs"][0]["id"]]
    prompt = instance["widgets_values"][0]  # the promoted positive_prompt box
    assert prompt.startswith("close up profile")
    registry = default_registry(entry_point_packs=False)
    workflow = import_comfy_data(data, registry, "image_flux3_klein_t2i", title="t").workflow
    (generate,) = [n for n in workflow["nodes"].values() if n["type"] == "LLMGenerate"]
    assert generate["params"]["prompt"] == prompt
    assert generate["params"]["system_prompt"].startswith("You are the prompt upsampler")


def test_an_unwired_primitive_keeps_its_own_value() -> None:
    from benchmarks.comfy_templates import templates_folder

    data = json.loads((templates_folder() / "image_flux3_klein_t2i.json").read_text(encoding="utf-8"))
    inner = data["definitions"]["subgraphs"][0]
    # Cut the wire into the inner prompt primitive and give it a value of its own: that value reaches the writer.
    (primitive,) = [n for n in inner["nodes"] if n["id"] == 17]
    primitive["inputs"][0]["link"] = None
    primitive["widgets_values"] = ["a red square"]
    inner["links"] = [link for link in inner["links"] if link["target_id"] != 17]
    registry = default_registry(entry_point_packs=False)
    workflow = import_comfy_data(data, registry, "image_flux3_klein_t2i", title="t").workflow
    (generate,) = [n for n in workflow["nodes"].values() if n["type"] == "LLMGenerate"]
    assert generate["params"]["prompt"] == "a red square"
