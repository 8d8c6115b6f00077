"""Which model families a ComfyUI workflow needs, and which of them Nodeloom cannot run, without the files.

Lives here: `FamilyProblem`, `family_problems`. Imports `nodes.comfy.graph`, `pipelines.diffusion.families`
(FAMILIES: the list of what runs), `pipelines.diffusion.family_detect` (our file-name markers) and
`nodes.comfy.wan_variants` (the Wan variants that are other models).

The signals are what ComfyUI itself uses to pick a model: a CLIP loader's `type` widget ("qwen_image",
"wan", "flux2", ...) and the loaders' file names (UNETLoader `unet_name`, checkpoint and VAE names). A
family is "runnable" exactly when its id is a key of FAMILIES, so a family another engineer registers (with
ComfyUI's id, e.g. "wan", "qwen_image") stops being reported without an edit here. Names are tried against
the other families' markers first, because ours are substrings of theirs ("flux" is in "flux2").
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from nodes.comfy.graph import ComfyGraph
from nodes.comfy.ltx25_check import ltx25_findings
from nodes.comfy.mapping_qwen21 import is_qwen21_graph
from nodes.comfy.wan_variants import wan_variant_findings
from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.family_detect import family_from_file_name

# ComfyUI's CLIP loader `type` -> our family id where the names differ; any other type is taken as the
# family id itself ("wan", "qwen_image", ...), so it runs once a family of that id is registered.
_CLIP_TYPE_FAMILY = {
    "stable_diffusion": "sd",
    "sd1": "sd",
    "sd2": "sd",
    "sdxl": "sdxl",
    "sd3": "sd3",
    "flux": "flux",
    "pixart": "pixart_sigma",
}
# ComfyUI runs Z-Image with a "lumina2" text encoder and LTX-2 with an "ltxv" one; the model files tell them apart.
_AMBIGUOUS_TYPES = {"lumina2": "zimage", "ltxv": "ltx2"}  # "ltxv": LTX-Video 0.9 or LTX-2 (by the files)
# File-name markers of families ComfyUI runs (ComfyUI's ids where we have no family), tried before ours.
_OTHER_NAME_MARKERS: tuple[tuple[str, str], ...] = (
    ("flux2", "flux2"),
    ("flux-2", "flux2"),
    ("flux_2", "flux2"),
    ("qwen_image_2.1", "qwenimage21"),  # before Qwen-Image's own marker, which it contains
    ("qwen-image-2.1", "qwenimage21"),
    ("qwen_image_2_1", "qwenimage21"),
    ("qwen_image", "qwen_image"),
    ("qwen-image", "qwen_image"),
    ("wan2", "wan"),
    ("wan_", "wan"),
    ("hunyuan", "hunyuan_video"),
    ("ltx-2", "ltx2"),  # LTX-2.x (ours) before LTX-Video 0.9.x ("ltxv": not run here)
    ("ltx2", "ltx2"),
    ("ltx_2", "ltx2"),
    ("ltx", "ltxv"),
    ("hidream", "hidream"),
    ("lumina", "lumina2"),
    ("netayume", "lumina2"),  # NetaYume Lumina: a Lumina 2 fine-tune whose file name omits "lumina"
    ("ming_image", "ming_image"),  # Ming Image: its Ling text encoder loads with CLIP type "qwen_image"
    ("ernie-image", "ernie_image"),  # ERNIE-Image: its Ministral encoder loads with CLIP type "flux2"
    ("ernie_image", "ernie_image"),
    ("chroma", "chroma"),
    ("omnigen", "omnigen2"),
    ("cosmos", "cosmos"),
    ("acestep", "ace"),
    ("ace_step", "ace"),
    ("stable_audio", "stable_audio"),
    ("minimax", "minimax"),
    ("kandinsky", "kandinsky5"),
    # Anima: a Cosmos-Predict2 model with a Qwen3 0.6B encoder, whose CLIP type reads as SD
    ("anima-", "anima"),  # with its separator, so that "animate" (Wan Animate) is not read as Anima
    ("anima_", "anima"),
    # FLUX.1 Fill: FLUX.1's loop here takes no inpainting channels (the k-samplers refuse them, a flow noise mask too)
    ("flux1-fill", "flux_fill"),
    ("flux.1-fill", "flux_fill"),
    # Registered families whose registry entry declares no name marker (yet).
    ("z_image", "zimage"),
    ("z-image", "zimage"),
)
# ComfyUI family ids -> ours where both run the same model under another id.
_COMFY_FAMILY_IDS = {"qwen_image": "qwenimage"}
# ComfyUI's one "flux2" is two families here, told apart by the model file's name.
_FLUX2 = ("flux2", "flux2_klein", "flux2_dev")


def _our_family(family: str, graph: ComfyGraph) -> str:
    """A ComfyUI family id as the registry names it (qwen_image -> qwenimage, or qwenimage21 in a 2.1 graph;
    flux2 -> klein or dev)."""
    if family == _FLUX2[0]:
        names = " ".join(
            str(node.inputs.get(widget, "")).lower()
            for node in graph.nodes.values()
            for widget in _NAME_WIDGETS.get(node.class_type, ())
        )
        return _FLUX2[1] if "klein" in names else _FLUX2[2]
    if family == "qwen_image" and is_qwen21_graph(graph):  # the same CLIP type names 2.1's Qwen3-VL
        return "qwenimage21"
    return _COMFY_FAMILY_IDS.get(family, family)


# Loader class -> the widgets that name a model file.
_NAME_WIDGETS = {
    "UNETLoader": ("unet_name",),
    "CheckpointLoaderSimple": ("ckpt_name",),
    "UnetLoaderGGUF": ("unet_name",),
}
_CLIP_LOADERS = ("CLIPLoader", "DualCLIPLoader")
# Text-encoder / LLM file-name markers of models that cannot run here from ComfyUI's file, for CLIP loaders whose
# `type` says nothing of them (ComfyUI's Qwen3.5 text-generation template loads its LLM with type
# "stable_diffusion"), with why. `pipelines.llm.comfy_te` reads Qwen3, Qwen2.5-VL, Qwen3-VL, Mistral, Gemma 3 and
# Qwen3.5's layout, but no tokenizer of Qwen3.5's released sizes ships here (its 248k vocabulary is not Qwen3's)
# and ComfyUI's file carries none, so a released Qwen3.5 file loads and cannot tokenize: refused here, before Run.
_TEXT_ENCODER_MARKERS: tuple[tuple[str, str, str], ...] = (
    ("qwen3.5", "qwen3_5", "Qwen3.5: no tokenizer of its released sizes ships here, and the file has none"),
    ("qwen3_5", "qwen3_5", "Qwen3.5: no tokenizer of its released sizes ships here, and the file has none"),
    ("qwen3.8", "qwen3_8", "no reader here loads Qwen3.8"),
)


def _text_encoder_findings(
    graph: ComfyGraph, used: Collection[str] | None
) -> list[tuple[str, str, str, str, str]]:
    """(node id, class, field, family, evidence) for a CLIP loader's file of an LLM family no reader here loads,
    among the loaders the run reads (`used`: node ids; None = all)."""
    found: list[tuple[str, str, str, str, str]] = []
    for node_id, node in graph.nodes.items():
        if node.class_type not in _CLIP_LOADERS or (used is not None and node_id not in used):
            continue
        for widget in ("clip_name", "clip_name1", "clip_name2"):
            name = node.inputs.get(widget)
            lowered = name.lower() if isinstance(name, str) else ""
            hit = next(((f, why) for marker, f, why in _TEXT_ENCODER_MARKERS if marker in lowered), None)
            if hit is not None:
                found.append((node_id, node.class_type, widget, hit[0], f"{name!r}: {hit[1]}"))
    return found


@dataclass(frozen=True)
class FamilyProblem:
    node: str
    class_type: str
    field: str
    family: str
    evidence: str  # what named the family: "type 'wan'", "'wan2.1_t2v.safetensors'"

    @property
    def message(self) -> str:
        runs = ", ".join(FAMILIES)
        return (
            f"{self.class_type}: model family {self.family!r} (from {self.evidence}) is not one Nodeloom "
            f"runs ({runs}); this workflow cannot run here"
        )


def family_of_name(name: Any) -> str | None:
    """A model file name -> a family id (ours or ComfyUI's), or None when the name says nothing."""
    if not isinstance(name, str):
        return None
    lowered = name.lower()
    for marker, family in _OTHER_NAME_MARKERS:
        if marker in lowered:
            return family
    return family_from_file_name(name)


def _name_families(graph: ComfyGraph) -> set[str]:
    return {
        family
        for node in graph.nodes.values()
        for widget in _NAME_WIDGETS.get(node.class_type, ())
        if (family := family_of_name(node.inputs.get(widget))) is not None
    }


_CONTROLNET_LOADERS = {"ControlNetLoader": "control_net_name", "DiffControlNetLoader": "control_net_name"}


def _controlnet_findings(graph: ComfyGraph) -> list[tuple[str, str, str, str, str]]:
    """(node id, class, field, family, evidence) for a ControlNet file of a flow-matching family (Qwen-Image's Fun
    Union, SD 3.5's canny, FLUX.1's): the samplers here apply ControlNets to SD 1.x and SDXL only, so such a
    graph would be refused at Run; the check says so first."""
    found: list[tuple[str, str, str, str, str]] = []
    for node_id, node in graph.nodes.items():
        widget = _CONTROLNET_LOADERS.get(node.class_type)
        name = node.inputs.get(widget) if widget is not None else None
        named = family_of_name(name)
        family = _our_family(named, graph) if named is not None else None
        if family in FAMILIES and FAMILIES[family].flow:
            title = FAMILIES[family].title
            evidence = f"{name!r}: a {title} ControlNet; Nodeloom runs SD 1.x and SDXL ControlNets"
            found.append((node_id, node.class_type, str(widget), f"{family}_controlnet", evidence))
    return found


def family_problems(graph: ComfyGraph, *, used: Collection[str] | None = None) -> list[FamilyProblem]:
    """One problem per loader node whose model family is not in FAMILIES (each family said once per node);
    `used`, where given, the node ids the imported run reads (a switched-off prompt writer's loader is not)."""
    named = _name_families(graph)
    out: list[FamilyProblem] = []
    for node_id, node in graph.nodes.items():
        if node.class_type in _CLIP_LOADERS and isinstance(node.inputs.get("type"), str):
            type_ = node.inputs["type"]
            family = _CLIP_TYPE_FAMILY.get(type_, type_)
            if type_ in _AMBIGUOUS_TYPES and _AMBIGUOUS_TYPES[type_] in named:
                family = _AMBIGUOUS_TYPES[type_]
            family = _our_family(family, graph)
            if family not in FAMILIES:
                out.append(FamilyProblem(node_id, node.class_type, "type", family, f"type {type_!r}"))
            continue
        for widget in _NAME_WIDGETS.get(node.class_type, ()):
            family = family_of_name(node.inputs.get(widget))
            family = _our_family(family, graph) if family is not None else None
            if family is not None and family not in FAMILIES:
                name = node.inputs[widget]
                out.append(FamilyProblem(node_id, node.class_type, widget, family, repr(name)))
    out += [
        FamilyProblem(*finding) for finding in _controlnet_findings(graph)
    ]  # only SD/SDXL ControlNets run
    out += [FamilyProblem(*finding) for finding in _text_encoder_findings(graph, used)]  # LLMs not read here
    out += [FamilyProblem(*finding) for finding in wan_variant_findings(graph)]  # Wan models run elsewhere
    out += [FamilyProblem(*finding) for finding in ltx25_findings(graph)]  # LTX-2.5's Gemma 4 encoder
    return out
