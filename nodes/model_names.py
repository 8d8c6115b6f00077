"""Model names in workflows: which loader parameters name a model, and resolving them through the models
library before a run.

Lives here: `MODEL_PARAMS`, `resolve_model_names`. Imports `nodes.workflow`, `pipelines.paths`,
`pipelines.models_library`.

A loader parameter may hold a path, `builtin:`/`demo:`, or a name relative to a library root; before a
run (and in `app check`) each name is replaced by the file it means, and a name found nowhere is a
validation problem that lists the folders searched.
"""

from __future__ import annotations

from nodes.workflow import Problem, Workflow
from pipelines.models_library import ModelsLibrary
from pipelines.paths import ModelNotFoundError, resolve_model_path

# node type -> (parameter, library kinds searched, first match wins)
MODEL_PARAMS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "LoadDiffusionModel": (("path", ("checkpoints", "diffusion_models")),),
    "LoadDenoiser": (("path", ("diffusion_models", "checkpoints")),),
    "LoadVAE": (("path", ("vae",)),),
    "LoadTextEncoder": tuple((p, ("text_encoders",)) for p in ("path", "path_2", "path_3")),
    "LoadLoRA": (("path", ("loras",)),),
    "LoadControlNet": (("path", ("controlnet",)),),
    "LoadUpscaleModel": (("path", ("upscale_models",)),),
}


def resolve_model_names(wf: Workflow, library: ModelsLibrary) -> list[Problem]:
    """Replace library names in loader parameters by their paths; a problem per name not found."""
    problems: list[Problem] = []
    for node_id, node in wf.nodes.items():
        for param, kinds in MODEL_PARAMS.get(node.type, ()):
            value = node.params.get(param)
            if not isinstance(value, str) or not value or param in node.inputs:
                continue
            if value.startswith(("builtin:", "demo:")):
                continue
            try:
                node.params[param] = str(resolve_model_path(value, library, kinds))
            except ModelNotFoundError as exc:
                problems.append(Problem(wf.source, node_id, param, str(exc)))
    return problems
