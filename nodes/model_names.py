"""File names in workflows: which parameters name a model or a picture, which of them came from another
tool's file (and so stay confined), and resolving them before a run.

Lives here: `MODEL_PARAMS`, `IMAGE_PARAMS`, `name_params`, `imported_names`, `confined_fields`,
`resolve_model_names`. Imports `nodes.workflow`, `pipelines.paths`, `pipelines.models_library`.

A loader parameter may hold a path, `builtin:`/`demo:`, or a name relative to a library root; before a
run (and in `app check`) each name is replaced by the file it means, and a name found nowhere is a
validation problem that lists the folders searched.

Who chose a name decides how far it may reach. The importer records every name it took from a ComfyUI
file (API, UI or PNG form) in `meta.comfyui.names` ({node: {field: value}}); while a field still holds
that value, it resolves only inside the models roots (pictures: ComfyUI's `input/` folder beside them):
absolute paths, `..` and links out of every root are refused, naming node and field. A value typed in
the editor, given with `--set` or swept replaces the recorded one and is the user's choice, taken as it
is, like every path in the user's own workflow files. `builtin:`/`demo:` never leave their folders.
"""

from __future__ import annotations

from typing import Any

from nodes.workflow import Problem, Workflow
from pipelines.models_library import ModelsLibrary, NameEscapeError, confined_relative
from pipelines.paths import (
    ModelNotFoundError,
    builtin_image_path,
    resolve_imported_image,
    resolve_imported_model,
    resolve_model_path,
)

# node type -> (parameter, library kinds searched, first match wins)
MODEL_PARAMS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "LoadDiffusionModel": (("path", ("checkpoints", "diffusion_models")),),
    "LoadDenoiser": (("path", ("diffusion_models", "checkpoints")),),
    # LTX-2's audio VAE and text connectors are in its checkpoint (LTXVAudioVAELoader, LTXAVTextEncoderLoader)
    "LoadVAE": (("path", ("vae", "checkpoints")),),
    "LoadTextEncoder": tuple((p, ("text_encoders", "checkpoints")) for p in ("path", "path_2", "path_3")),
    "LoadLoRA": (("path", ("loras",)),),
    "LoadControlNet": (("path", ("controlnet",)),),
    "LoadUpscaleModel": (("path", ("upscale_models",)),),
    "LoadCLIPVision": (("path", ("clip_vision",)),),
    "LoadLatentUpsampler": (("path", ("latent_upscale_models",)),),
}
# Model parameters that are names only when an import wrote them (a ComfyUI TextGenerate's LLM is its text
# encoder's file: nodes/comfy/llm_loaders.py): confined and looked up like the others while the imported
# name stands; a path the user or the server sets there stays a path.
IMPORTED_MODEL_PARAMS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "LoadLLM": (("path", ("text_encoders",)),),
}
# node type -> parameters naming a picture to read
IMAGE_PARAMS: dict[str, tuple[str, ...]] = {"LoadImage": ("path",), "LoadVideo": ("path",)}
COMFY_META_KEY = "comfyui"  # the same key as nodes.comfy.convert's (that module imports this one)
_NAMES_KEY = "names"


def name_params(node_type: str) -> list[str]:
    """The parameters of `node_type` that name a file (a model or a picture)."""
    return [p for p, _ in MODEL_PARAMS.get(node_type, ())] + list(IMAGE_PARAMS.get(node_type, ()))


def imported_names(nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """What the importer records in `meta.comfyui.names`: every file name it wrote, by node and field."""
    out: dict[str, dict[str, str]] = {}
    for node_id, data in nodes.items():
        params = data.get("params", {})
        fields = {p: params[p] for p in name_params(data.get("type", "")) if isinstance(params.get(p), str)}
        if fields:
            out[node_id] = fields
    return out


def confined_fields(wf: Workflow) -> set[tuple[str, str]]:
    """(node, field) pairs that still hold the name a ComfyUI file gave them."""
    meta = wf.meta.get(COMFY_META_KEY)
    names = meta.get(_NAMES_KEY) if isinstance(meta, dict) else None
    if not isinstance(names, dict):
        return set()
    out: set[tuple[str, str]] = set()
    for node_id, fields in names.items():
        node = wf.nodes.get(node_id)
        if node is None or not isinstance(fields, dict):
            continue
        out.update((node_id, p) for p, value in fields.items() if node.params.get(p) == value)
    return out


def _check_scheme(value: str, image: bool) -> None:
    """A `builtin:`/`demo:` name that would leave its folder raises NameEscapeError (existence not asked)."""
    if image:
        builtin_image_path(value)
    else:
        resolve_model_path(value)


def _confined_shape(value: str, image: bool) -> None:
    """Without a library: only what the name says can be checked (absolute, `..`, scheme escapes)."""
    if value.startswith(("builtin:", "demo:")):
        try:
            _check_scheme(value, image)
        except ModelNotFoundError:
            pass  # a missing built-in is for the loader to say
        return
    confined_relative(
        value, "ComfyUI's input folder and the models folders" if image else "the models folders"
    )


def resolve_model_names(wf: Workflow, library: ModelsLibrary, *, find: bool = True) -> list[Problem]:
    """Replace file names by their paths; a problem per name that is not found or reaches too far.

    User-chosen names go through the library when one is set (and are left alone when not); imported
    names always stay inside the roots. `find=False` (`app check` without a library) checks only what an
    imported name says about itself (absolute, `..`), since there is no root to look in."""
    problems: list[Problem] = []
    confined = confined_fields(wf)
    for node_id, node in wf.nodes.items():
        kinds_of = dict(MODEL_PARAMS.get(node.type, ()))
        params = name_params(node.type)
        for param, kinds in IMPORTED_MODEL_PARAMS.get(node.type, ()):
            if (node_id, param) in confined:
                kinds_of[param] = kinds
                params.append(param)
        for param in params:
            value = node.params.get(param)
            if not isinstance(value, str) or not value or param in node.inputs:
                continue
            image = param not in kinds_of
            try:
                if (node_id, param) in confined:
                    if not find:
                        _confined_shape(value, image)
                        continue
                    if value.startswith(("builtin:", "demo:")) and not image:
                        resolve_model_path(value)  # confined to its folder; demo: may be built later
                        continue
                    path = (
                        resolve_imported_image(value, library)
                        if image
                        else resolve_imported_model(value, library, kinds_of[param])
                    )
                elif value.startswith(("builtin:", "demo:")):
                    try:
                        _check_scheme(value, image)
                    except ModelNotFoundError:
                        pass  # the loader says what is missing, as before
                    continue
                elif image or not library:
                    continue  # the user's own picture or path: taken as it is
                else:
                    path = resolve_model_path(value, library, kinds_of[param])
            except (ModelNotFoundError, NameEscapeError) as exc:
                origin = " (named by the imported ComfyUI workflow)" if (node_id, param) in confined else ""
                problems.append(Problem(wf.source, node_id, param, f"{exc}{origin}"))
                continue
            node.params[param] = str(path)
    return problems
