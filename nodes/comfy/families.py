"""Which model family a ComfyUI workflow or file name points at, when the file itself is not at hand.

Lives here: `family_from_name`, `graph_family_hint`, `denoiser_family`. Imports `nodes.comfy.graph`,
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


def family_from_name(name: Any) -> str | None:
    """flux1-dev.safetensors -> "flux", flux-2-klein-4b... -> "flux2_klein", sd3.5_large... -> "sd3"."""
    lowered = name.lower() if isinstance(name, str) else ""
    if any(marker in lowered for marker in _FLUX2_MARKERS):
        return "flux2_klein" if "klein" in lowered else "flux2_dev"
    return family_from_file_name(name)


def graph_family_hint(graph: ComfyGraph) -> str | None:
    """The family a workflow's own nodes point at (Flux before SD3: Flux templates use SD3 latents)."""
    hints = {_GRAPH_HINTS[n.class_type] for n in graph.nodes.values() if n.class_type in _GRAPH_HINTS}
    for node in graph.nodes.values():
        if node.class_type in ("CLIPLoader", "DualCLIPLoader") and node.inputs.get("type") in ("flux", "sd3"):
            hints.add(node.inputs["type"])
    return "flux" if "flux" in hints else "sd3" if "sd3" in hints else None


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
    for node in graph.nodes.values():
        widget = _DENOISER_NAMES.get(node.class_type)
        name = node.inputs.get(widget) if widget else None
        if isinstance(name, str):
            family = detect(name) or family_from_name(name)
            if family is not None:
                found.add(family)
    return found.pop() if len(found) == 1 else None
