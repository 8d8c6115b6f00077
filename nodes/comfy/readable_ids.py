"""Readable node ids for an imported ComfyUI graph: `ksampler`, `vae_decode`, `load_checkpoint`,
`ksampler_2`, ... instead of ComfyUI's "3", "8", "12:5".

Lives here: `readable_id`, `use_readable_ids`. Imports `nodes.comfy.graph`.

The new id comes from the ComfyUI class (a few loaders get the name a user reads in the editor:
CheckpointLoaderSimple is `load_checkpoint`), numbered `_2`, `_3`, ... in ComfyUI id order. Each
`ComfyNode` keeps its ComfyUI id in `comfy_id`; the importer writes them to `meta.comfyui.ids` so that
`app export-comfy` writes the original ids back. Every link, note and layout entry is rewritten, so the
import report, `app check` and the timeline all name the readable id.
"""

from __future__ import annotations

import dataclasses
import re

from nodes.comfy.graph import ComfyGraph, LinkRef

# ComfyUI classes whose snake-cased name reads badly, or not as what the node does.
_NAMES = {
    "CheckpointLoaderSimple": "load_checkpoint",
    "KSampler": "ksampler",
    "KSamplerAdvanced": "ksampler_advanced",
    "KSamplerSelect": "ksampler_select",
    "UNETLoader": "load_unet",
    "VAELoader": "load_vae",
    "CLIPLoader": "load_clip",
    "DualCLIPLoader": "load_clip",
    "TripleCLIPLoader": "load_clip",
    "LoraLoader": "load_lora",
    "LoraLoaderModelOnly": "load_lora",
    "ControlNetLoader": "load_controlnet",
    "UpscaleModelLoader": "load_upscale_model",
    "CLIPTextEncode": "text_encode",
    "CLIPVisionLoader": "load_clip_vision",
}
# The longest id a class gives (a custom node's class name can be anything).
_MAX_BASE = 40


def readable_id(class_type: str) -> str:
    """The id base for a ComfyUI class: "VAEDecode" -> vae_decode, "EmptySD3LatentImage" ->
    empty_sd3_latent_image; anything that is not a letter or digit becomes one underscore."""
    if class_type in _NAMES:
        return _NAMES[class_type]
    name = class_type.replace("ControlNet", "Controlnet").replace("LoRA", "Lora")  # one word each
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    base = re.sub(r"[^a-z0-9]+", "_", spaced.lower()).strip("_")[:_MAX_BASE].strip("_")
    return base if base and not base[0].isdigit() else f"node_{base}".strip("_")


def _id_order(comfy_id: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in comfy_id.split(":"))


def use_readable_ids(graph: ComfyGraph) -> dict[str, str]:
    """Renames every node of `graph` in place to a readable id and returns ComfyUI id -> new id."""
    renamed: dict[str, str] = {}
    taken: set[str] = set()
    counts: dict[str, int] = {}
    # Numbered in ComfyUI id order ("3" before "12", "12:2" after "12"), so the API and UI forms of one
    # workflow (a ComfyUI PNG carries both) give the same ids.
    for old_id in sorted(graph.nodes, key=_id_order):
        base = readable_id(graph.nodes[old_id].class_type)
        counts[base] = counts.get(base, 0) + 1
        new_id = base if counts[base] == 1 else f"{base}_{counts[base]}"
        while new_id in taken:  # "ksampler_2" taken by a class that snake-cases to it
            counts[base] += 1
            new_id = f"{base}_{counts[base]}"
        renamed[old_id] = new_id
        taken.add(new_id)
    nodes = {}
    for old_id, node in graph.nodes.items():
        node.comfy_id, node.id = old_id, renamed[old_id]
        node.inputs = {
            name: LinkRef(renamed.get(value.node, value.node), value.slot)
            if isinstance(value, LinkRef)
            else value
            for name, value in node.inputs.items()
        }
        nodes[node.id] = node
    graph.nodes = nodes
    graph.notes = [
        dataclasses.replace(note, node=renamed.get(note.node, note.node)) if note.node else note
        for note in graph.notes
    ]
    return renamed
