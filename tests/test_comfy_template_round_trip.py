"""Round trip over ComfyUI's published templates (the `comfyui-workflow-templates-json` package): every
open-weight template that imports (no unsupported node, a valid Nodeloom workflow) exports back with
`export_api` to a prompt in ComfyUI's API format, with ComfyUI's own ids, and that prompt imports again to
the same nodes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks.comfy_templates import open_weight_usage, templates_folder
from nodes.comfy.api_format import is_api_format
from nodes.comfy.declarations import COMFY_CLASSES
from nodes.comfy.export import export_api
from nodes.comfy.sources import import_comfy_data
from nodes.workflow import WorkflowError, workflow_from_dict


def _api_problems(prompt: dict) -> list[str]:
    """What ComfyUI's prompt validation would refuse in the shape: each node a class_type and an inputs
    object, each link [an id of the prompt, an output slot the class has]."""
    if not is_api_format(prompt):
        return ["not API format"]
    problems = []
    for nid, node in prompt.items():
        if not isinstance(node.get("inputs"), dict):
            problems.append(f"{nid}: inputs is not an object")
            continue
        for name, value in node["inputs"].items():
            if not isinstance(value, list):
                continue
            if len(value) != 2 or value[0] not in prompt or not isinstance(value[1], int) or value[1] < 0:
                problems.append(f"{nid}.{name}: {value!r} is not a link to a node of the prompt")
                continue
            source = COMFY_CLASSES.get(prompt[value[0]]["class_type"])
            if source is not None and source.outputs and value[1] >= len(source.outputs):
                problems.append(f"{nid}.{name}: slot {value[1]} of a {prompt[value[0]]['class_type']}")
    return problems


@pytest.mark.slow
def test_every_template_that_imports_exports_back_and_imports_again(registry) -> None:
    # ComfyUI's template package is a dev-machine download, not a dependency (benchmarks/comfy_templates.py
    # says how to get it); without it there is nothing to round-trip.
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    folder = templates_folder()
    done: list[str] = []
    for name in sorted(open_weight_usage(folder)):
        data = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        first = import_comfy_data(data, registry, name, title=name)
        if first.unsupported:
            continue
        try:
            wf = workflow_from_dict(first.workflow, registry)
        except WorkflowError:
            continue  # imports with problems of its own (`app check` lists them): nothing to export
        prompt = export_api(wf, registry)
        assert _api_problems(prompt) == [], name
        kept = first.workflow["meta"]["comfyui"]["ids"]
        assert set(kept.values()) <= set(prompt), name  # ComfyUI's own ids written back
        again = import_comfy_data(prompt, registry, name, title=name)
        assert again.unsupported == [], name
        types = Counter(n["type"] for n in first.workflow["nodes"].values())
        assert Counter(n["type"] for n in again.workflow["nodes"].values()) == types, name
        done.append(name)
    # Not a vacuous loop: at this package version (0.1.123) 51 of the 309 templates import and validate.
    assert len(done) >= 45, done
