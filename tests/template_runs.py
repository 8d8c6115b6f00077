"""Test support for running ComfyUI's published templates on tiny fixtures under the templates' own file names.

Lives here: `template_file`, `import_template`, `native_graph`, `max_diff`. May import: stdlib, numpy, pytest,
app.main, benchmarks.comfy_templates.

A template is imported with `app import --models-dir` (so the loaders see the tiny files' headers, as a user's
ComfyUI models folder would show them), checked with `app check`, and run; the picture it gives is compared
with "our native graph": the same imported workflow with its three split loaders replaced by one Load Model
node reading the demo's diffusers folder, which holds the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.main import main

SPLIT_LOADERS = ("LoadDenoiser", "LoadTextEncoder", "LoadVAE")


def template_file(name: str) -> Path:
    """The published template's JSON; skips the test when ComfyUI's template package is not installed."""
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from benchmarks.comfy_templates import templates_folder

    path = templates_folder() / f"{name}.json"
    assert path.is_file(), f"{name} is not in this templates package"
    return path


def import_template(name: str, models: Path, out: Path) -> dict[str, Any]:
    """`app import` of a template against a models folder, then `app check` of the result (exit 0 asserted)."""
    assert main(["import", str(template_file(name)), "-o", str(out), "--models-dir", str(models)]) == 0
    assert main(["check", str(out), "--models-dir", str(models)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def native_graph(workflow: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The workflow with its split loaders replaced by one LoadDiffusionModel reading `folder`."""
    graph = json.loads(json.dumps(workflow))
    nodes = graph["nodes"]
    loaders = [nid for nid, node in nodes.items() if node["type"] in SPLIT_LOADERS]
    assert len(loaders) == 3, f"expected the three split loaders, found {loaders}"
    for nid in loaders:
        del nodes[nid]
        graph.get("ui", {}).get("nodes", {}).pop(nid, None)
    nodes["native_load"] = {"type": "LoadDiffusionModel", "params": {"path": str(folder)}, "inputs": {}}
    for node in nodes.values():
        for port, link in node.get("inputs", {}).items():
            if isinstance(link, list) and link and link[0] in loaders:
                node["inputs"][port] = ["native_load", link[1]]  # the same output name: denoiser, ...
    return graph


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    assert len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b, strict=True))
    return max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b, strict=True))
