"""Which model family a ComfyUI workflow or file name points at, when the file itself is not at hand.

Lives here: `family_from_name`, `graph_family_hint`, `edit_family`, `denoiser_family`,
`text_encoder_family`. Imports `nodes.comfy.graph`,
`pipelines.diffusion.family_detect` (the family registry's detector, which owns the file-name markers).

The models library reads a file's header when it finds the file; these guesses cover the rest, and every
guess is reported in the import notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.comfy.graph import ComfyGraph
from pipelines.diffusion.family_detect import family_from_file_name

# ComfyUI nodes that only appear in one family's workflows (values: family ids of the registry).
_GRAPH_HINTS = {
    "CLIPTextEncodeFlux": "flux",
    "FluxGuidance": "flux",
    "ModelSamplingFlux": "flux",
    "TripleCLIPLoader": "sd3",
    "EmptySD3LatentImage": "sd3",
    "ModelSamplingSD3": "sd3",
}


# FLUX.2's files contain "flux" too: told apart first (klein or dev), since the registry's markers do not.
_FLUX2_MARKERS = ("flux2", "flux-2", "flux_2", "flux.2")


# ComfyUI's file names of families the registry declares no name marker for, or whose names contain another
# family's marker ("qwen_image_edit_2509" holds Qwen-Image's "qwen_image"): tried first.
_COMFY_NAME_MARKERS = (
    ("qwen_image_edit", "qwenimage_edit"),
    ("qwen-image-edit", "qwenimage_edit"),
    ("krea2", "krea2"),
    ("krea-2", "krea2"),
)
# (the text encoder's family by its loader's type, the denoiser's) -> the encoder's: the same Qwen2.5-VL file
# serves Qwen-Image and Qwen-Image-Edit, whose prompt nodes need the edit family's encoder.
_ENCODER_FOLLOWS_DENOISER = {("qwenimage", "qwenimage_edit")}


def family_from_name(name: Any) -> str | None:
    """flux1-dev.safetensors -> "flux", flux-2-klein-4b... -> "flux2_klein", sd3.5_large... -> "sd3"."""
    lowered = name.lower() if isinstance(name, str) else ""
    for marker, family in _COMFY_NAME_MARKERS:
        if marker in lowered:
            return family
    if any(marker in lowered for marker in _FLUX2_MARKERS):
        return "flux2_klein" if "klein" in lowered else "flux2_dev"
    return family_from_file_name(name)


# Prompt nodes only a Qwen-Image-Edit model reads (its finetunes, FireRed-Image-Edit, keep other file names).
_EDIT_PROMPTS = ("TextEncodeQwenImageEdit", "TextEncodeQwenImageEditPlus")


def graph_family_hint(graph: ComfyGraph) -> str | None:
    """The family a workflow's own nodes point at (Flux before SD3: Flux templates use SD3 latents)."""
    if any(n.class_type in _EDIT_PROMPTS for n in graph.nodes.values()):
        return "qwenimage_edit"
    hints = {_GRAPH_HINTS[n.class_type] for n in graph.nodes.values() if n.class_type in _GRAPH_HINTS}
    for node in graph.nodes.values():
        if node.class_type in ("CLIPLoader", "DualCLIPLoader") and node.inputs.get("type") in ("flux", "sd3"):
            hints.add(node.inputs["type"])
    return "flux" if "flux" in hints else "sd3" if "sd3" in hints else None


def edit_family(family: str | None, graph: ComfyGraph) -> str | None:
    """Qwen-Image where the workflow's prompts are Qwen-Image-Edit's: the edit family (a file's header does not
    tell the two apart; their transformers have the same tensors)."""
    if family == "qwenimage" and any(n.class_type in _EDIT_PROMPTS for n in graph.nodes.values()):
        return "qwenimage_edit"
    return family


# Denoiser loaders and the widget naming their file (a checkpoint's VAE is its own, but a separate VAELoader
# beside it decodes its latents all the same).
_DENOISER_NAMES = {
    "UNETLoader": "unet_name",
    "UnetLoaderGGUF": "unet_name",
    "CheckpointLoaderSimple": "ckpt_name",
}


def denoiser_family(graph: ComfyGraph, detect: Callable[[str], str | None]) -> str | None:
    """The one family of the workflow's denoiser files (from their headers, else their names), or None when
    they name none or several. A VAE file cannot tell its family: every 16-channel LDM VAE reads as SD3's,
    though Z-Image and FLUX.1 ship their own `ae.safetensors`; the denoiser it decodes for can."""
    found = set()
    edit_prompts = any(n.class_type in _EDIT_PROMPTS for n in graph.nodes.values())
    for node in graph.nodes.values():
        widget = _DENOISER_NAMES.get(node.class_type)
        name = node.inputs.get(widget) if widget else None
        if isinstance(name, str):
            family = edit_family(detect(name) or family_from_name(name), graph)
            if family is None and node.class_type != "CheckpointLoaderSimple" and edit_prompts:
                family = "qwenimage_edit"  # a finetune under its own name, read by the edit prompt nodes
            if family is not None:
                found.add(family)
    return found.pop() if len(found) == 1 else None


def text_encoder_family(family: str, graph: ComfyGraph, detect: Callable[[str], str | None]) -> str:
    """A CLIP loader's family, or the denoiser's where both read the same text encoder file."""
    denoiser = denoiser_family(graph, detect)
    return denoiser if denoiser is not None and (family, denoiser) in _ENCODER_FOLLOWS_DENOISER else family
