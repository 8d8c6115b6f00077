"""The cfg a Sampler exports as: ComfyUI's meaning of cfg, where a family's differs from ours, and its rule.

Lives here: `comfy_cfg_offset`, `add_cfg_norms`. Imports `nodes.workflow`, `nodes.comfy.families` (names ->
family), `pipelines.diffusion.families` (the registry, for `Family.comfy_cfg_offset`).

The importer (`nodes.comfy.convert`) subtracts the family's offset from ComfyUI's cfg; exporting adds it back,
so a round trip keeps ComfyUI's value and a graph made here exports the value that gives ComfyUI its picture.
The family is found the way the importer finds it without the files: the loader the sampler's denoiser comes
from (through LoRAs and shift patches), its `family` parameter, else the name of its file.

A sampler whose `cfg_rule` is comfyui_cfgnorm (an imported Qwen-Image graph's CFGNorm) gets that CFGNorm node
back in front of its model input (`add_cfg_norms`): what ComfyUI needs to run the same rule.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.families import family_from_name
from nodes.workflow import Workflow
from pipelines.diffusion.families import FAMILIES

_PATCHES = ("LoadLoRA", "ModelSamplingShift")  # the same model, patched: follow their denoiser input


def comfy_cfg_offset(wf: Workflow, sampler_id: str) -> float:
    """What to add to the sampler's cfg for ComfyUI (0 where the meanings agree or the family is unknown)."""
    link = wf.nodes[sampler_id].inputs.get("denoiser")
    for _ in range(32):  # a chain of patches, never a cycle in a valid graph
        source = wf.nodes.get(link.node) if link is not None else None
        if source is None:
            return 0.0
        if source.type in _PATCHES:
            link = source.inputs.get("denoiser")
            continue
        family = source.params.get("family")
        if family not in FAMILIES:
            family = family_from_name(source.params.get("path"))
        return FAMILIES[family].comfy_cfg_offset if family in FAMILIES else 0.0
    return 0.0


def add_cfg_norms(wf: Workflow, prompt: dict[str, Any], ids: dict[str, str]) -> None:
    """A CFGNorm (strength: the sampler's `cfg_norm`) between each comfyui_cfgnorm sampler and its model."""
    for nid, node in wf.nodes.items():
        entry = prompt.get(ids.get(nid, ""))
        if (
            node.params.get("cfg_rule") != "comfyui_cfgnorm"
            or entry is None
            or "model" not in entry["inputs"]
        ):
            continue
        number = len(prompt) + 1
        while str(number) in prompt:
            number += 1
        prompt[str(number)] = {
            "class_type": "CFGNorm",
            "inputs": {"model": entry["inputs"]["model"], "strength": node.params.get("cfg_norm", 1.0)},
            "_meta": {"title": f"{nid} CFGNorm"},
        }
        entry["inputs"]["model"] = [str(number), 0]
