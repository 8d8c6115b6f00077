"""Test support for ComfyUI-layout files: tiny fixtures written as ComfyUI's files, and the split-loader graph.

Lives here: `comfy_fixture`, `split_graph`, `run_graph`, `run_in_process`, `assert_greedy_as_transformers`,
`config_content`. May import: stdlib, numpy, PIL, torch, app.main, memory, nodes, pipelines.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from app.main import main
from pipelines.diffusion.comfy_layouts.writer import COMFY_FILES, write_comfy_files
from tests.demo_support import copy_demo_model

REPO = Path(__file__).resolve().parent.parent
# What a config records about the library that wrote it, not the model: a new transformers or diffusers release
# rewrites it (transformers 5.24 -> 5.25 did on 2026-12-03) while every other byte stays.
_WRITER_VERSIONS = ("transformers_version", "_diffusers_version")


def config_content(path: Path) -> object:
    """A shipped config file's content as a rebuild must reproduce it: a JSON file parsed, without the writer
    libraries' version fields (at any depth); any other file its bytes."""
    if path.suffix != ".json":
        return path.read_bytes()

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in _WRITER_VERSIONS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(path.read_text(encoding="utf-8")))


DEMOS = {
    "zimage": "tiny-zimage",
    "qwenimage": "tiny-qwenimage",
    "flux2_klein": "tiny-flux2-klein",
    "flux2_dev": "tiny-flux2-dev",
    "wan": "tiny-wan",
    "qwenimage_edit": "tiny-qwenimage-edit",
}


def comfy_fixture(family: str, tmp: Path) -> tuple[Path, Path]:
    """(the demo's diffusers folder, a ComfyUI root whose models/ holds the same weights as ComfyUI's files)."""
    folder = copy_demo_model(DEMOS[family], tmp / DEMOS[family])
    return folder, write_comfy_files(folder, family, tmp / "ComfyUI")


def split_graph(
    workflow: Path,
    models: Path,
    family: str,
    *,
    transformer: str | None = None,
    loader_params: dict | None = None,
) -> dict:
    """`workflow` (one LoadDiffusionModel node "load") with that node replaced by the three split loaders
    (ComfyUI's UNETLoader / CLIPLoader / VAELoader) reading `models/diffusion_models|text_encoders|vae`."""
    graph = json.loads(workflow.read_text(encoding="utf-8"))
    names = COMFY_FILES[family]
    nodes = graph["nodes"]
    del nodes["load"]
    params = loader_params or {}
    nodes["unet"] = {
        "type": "LoadDenoiser",
        "params": {
            "path": str(models / "diffusion_models" / (transformer or names.transformer)),
            **params.get("unet", {}),
        },
        "inputs": {},
    }
    nodes["clip"] = {
        "type": "LoadTextEncoder",
        "params": {"path": str(models / "text_encoders" / names.text_encoder), **params.get("clip", {})},
        "inputs": {},
    }
    nodes["vae"] = {
        "type": "LoadVAE",
        "params": {"path": str(models / "vae" / names.vae), **params.get("vae", {})},
        "inputs": {},
    }
    ports = {"denoiser": "unet", "text_encoder": "clip", "vae": "vae"}
    for node in nodes.values():
        for name, link in node.get("inputs", {}).items():
            if isinstance(link, list) and link[0] == "load":
                node["inputs"][name] = [ports[link[1]], link[1]]
    ui = graph.get("ui", {}).get("nodes", {})
    if "load" in ui:
        pos = ui.pop("load")
        ui.update({k: copy.deepcopy(pos) for k in ("unet", "clip", "vae")})
    return graph


def run_graph(graph: dict | Path, out: Path, sets: dict, extra: tuple[str, ...] = ()) -> list[np.ndarray]:
    """Run a workflow with the CLI; the saved pictures (PNG frames for videos), in name order."""
    path = graph
    if isinstance(graph, dict):
        path = out.parent / f"{out.name}.json"
        path.write_text(json.dumps(graph), encoding="utf-8")
    args = ["--run", str(path), "--out", str(out), "--quiet", "--device", "cpu", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 0
    pngs = sorted(out.rglob("*.png"))
    assert pngs, f"no pictures in {out}"
    return [np.asarray(Image.open(p).convert("RGB")) for p in pngs]


def run_in_process(graph: dict[str, Any], tmp_path: Path) -> Any:
    """Run a workflow dict with the executor in this process (its outputs inspectable), the manager closed after;
    the run's result, asserted ok."""
    from memory import MemoryConfig, MemoryManager
    from nodes.executor import Executor
    from nodes.registry import default_registry
    from nodes.workflow import load_workflow

    path = tmp_path / "run.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    registry = default_registry(entry_point_packs=False)
    mm = MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path / "memory"))
    try:
        result = Executor(registry, memory=mm).run(load_workflow(path, registry), out_dir=tmp_path / "out")
    finally:
        mm.close()
    assert result.ok, result.error
    return result


def assert_greedy_as_transformers(
    memory: Any, llm: Any, reference: Any, prompt: str = "a red fox in the snow"
) -> None:
    """Load LLM's 12 greedy tokens for `prompt` equal transformers' `generate` on `reference` (the same weights)."""
    import torch

    from pipelines.llm.runtime import GenerationRequest, generate_text

    request = GenerationRequest(prompt=prompt, chat=False, max_new_tokens=12, kv_cache="dynamic")
    out = generate_text(memory, llm, request)
    ids = torch.tensor([llm.tokenizer(prompt, add_special_tokens=True)["input_ids"]])
    with torch.no_grad():
        expected = reference.generate(
            ids, max_new_tokens=12, do_sample=False, eos_token_id=list(llm.eos_ids), pad_token_id=0
        )[0, ids.shape[1] :].tolist()
    # The same float32 weights and the same (dynamic-cache) model calls: the same argmax at every step.
    assert out.result.tokens == expected
    assert len(expected) > 1
