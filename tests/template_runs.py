"""Test support for running ComfyUI's published templates on tiny fixtures under the templates' own file names.

Lives here: `template_file`, `template_names`, `place_under_template_names`, `place_pictures`,
`place_loras`,
`small_kontext_scale`,
`write_flux1_files`, `import_template`, `native_graph`,
`max_diff`. May import: stdlib, numpy, pytest, app.main, benchmarks.comfy_templates, nodes.comfy,
pipelines.diffusion.comfy_layouts.writer,
pipelines.diffusion.comfy_layouts.template_fixtures (`write_flux1_files` lives there, re-exported).

A template is imported with `app import --models-dir` (so the loaders see the tiny files' headers, as a user's
ComfyUI models folder would show them), checked with `app check`, and run; the picture it gives is compared
with "our native graph": the same imported workflow with its three split loaders replaced by one Load Model
node reading the demo's diffusers folder, which holds the same weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from app.main import main
from nodes.comfy.sources import import_comfy_data
from nodes.registry import default_registry
from pipelines.diffusion.comfy_layouts.template_fixtures import write_flux1_files  # noqa: F401 (re-exported)
from pipelines.diffusion.comfy_layouts.writer import COMFY_FILES

SPLIT_LOADERS = ("LoadDenoiser", "LoadTextEncoder", "LoadVAE")
# Our split loader -> (ComfyUI's models sub-folder, the fixture file of that role in COMFY_FILES).
_ROLE = {
    "LoadDenoiser": ("diffusion_models", "transformer"),
    "LoadTextEncoder": ("text_encoders", "text_encoder"),
    "LoadVAE": ("vae", "vae"),
}


def template_file(name: str) -> Path:
    """The published template's JSON; skips the test when ComfyUI's template package is not installed."""
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from benchmarks.comfy_templates import templates_folder

    path = templates_folder() / f"{name}.json"
    assert path.is_file(), f"{name} is not in this templates package"
    return path


def template_names(name: str) -> dict[str, str]:
    """Our split loader type -> the model file name the template's loader of that type asks for."""
    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    result = import_comfy_data(data, default_registry(entry_point_packs=False), name, title=name)
    names = {n["type"]: n["params"]["path"] for n in result.workflow["nodes"].values() if n["type"] in _ROLE}
    assert set(names) == set(_ROLE), f"{name}: expected the three split loaders, found {sorted(names)}"
    return names


def place_under_template_names(name: str, family: str, models: Path) -> None:
    """Hard links to the fixture's files under the names the template asks for (its 9B or fp8 names hold the
    tiny demo's weights: the loaders pick the config by the tensors' shapes, not by the name)."""
    for loader, file_name in template_names(name).items():
        sub, role = _ROLE[loader]
        target = models / sub / file_name
        if not target.exists():
            os.link(models / sub / getattr(COMFY_FILES[family], role), target)


def place_pictures(name: str, root: Path, size: tuple[int, int] = (64, 48)) -> None:
    """A picture (a smooth colour ramp with a square, `size` = width, height) under each name the template's
    Load Image nodes ask for, in ComfyUI's `input/` beside `models/`."""
    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    result = import_comfy_data(data, default_registry(entry_point_packs=False), name, title=name)
    w, h = size
    ys, xs = np.mgrid[0:h, 0:w]
    rgb = np.stack([xs * 255 // max(w - 1, 1), ys * 255 // max(h - 1, 1), np.full_like(xs, 96)], -1)
    rgb[h // 4 : h // 2, w // 4 : w // 2] = (240, 240, 40)
    for node in result.workflow["nodes"].values():
        if node["type"] == "LoadImage":
            target = root / "input" / node["params"]["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rgb.astype(np.uint8)).save(target)


def place_loras(name: str, models: Path, folder: Path, family: str) -> None:
    """A small diffusers/PEFT LoRA of the demo's transformer (two layers of its first block, seeded) under each
    name the template's LoRA loaders that run ask for: both runs apply the same file."""
    import torch

    from pipelines.diffusion.families import FAMILIES
    from tests.lora_fixtures import write_peft

    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    result = import_comfy_data(data, default_registry(entry_point_packs=False), name, title=name)
    wanted = [n["params"]["path"] for n in result.workflow["nodes"].values() if n["type"] == "LoadLoRA"]
    if not wanted:
        return
    fam = FAMILIES[family]
    model = fam.denoiser_class.from_pretrained(str(folder), subfolder=fam.denoiser_subfolder)
    block = f"{fam.denoiser_blocks[0]}.0."
    linears = [n for n, m in model.named_modules() if n.startswith(block) and isinstance(m, torch.nn.Linear)]
    for i, file_name in enumerate(wanted):
        (models / "loras").mkdir(parents=True, exist_ok=True)
        target = models / "loras" / file_name
        write_peft(target, {"transformer": model}, {"transformer": tuple(linears[:2])}, seed=7 + i, scale=0.5)


def small_kontext_scale(workflow: dict[str, Any], width: int, height: int) -> dict[str, Any]:
    """The workflow with each Kontext-size scale (about a megapixel, too big for a test's CPU run) replaced by a
    plain Lanczos scale to `width` x `height`; both runs of a test get the same replacement."""
    graph = json.loads(json.dumps(workflow))
    for node in graph["nodes"].values():
        if node["type"] == "FluxKontextImageScale":
            node["type"] = "ImageScale"
            node["params"] = {"width": width, "height": height, "method": "lanczos", "crop": "center"}
    return graph


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
