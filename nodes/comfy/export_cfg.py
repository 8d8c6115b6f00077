"""The cfg a Sampler exports as: ComfyUI's meaning of cfg, where a family's differs from ours.

Lives here: `comfy_cfg_offset`. Imports `nodes.workflow`, `nodes.comfy.families` (names -> family),
`pipelines.diffusion.families` (the registry, for `Family.comfy_cfg_offset`).

The importer (`nodes.comfy.convert`) subtracts the family's offset from ComfyUI's cfg; exporting adds it back,
so a round trip keeps ComfyUI's value and a graph made here exports the value that gives ComfyUI its picture.
The family is found the way the importer finds it without the files: the loader the sampler's denoiser comes
from (through LoRAs and shift patches), its `family` parameter, else the name of its file.
"""

from __future__ import annotations

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
