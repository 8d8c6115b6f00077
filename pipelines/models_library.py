"""The models library: one or more model roots, searched by name, listed with size, family and format.

Lives here: `ModelsLibrary`, `ModelEntry`, `MODEL_KINDS`, `KIND_FOLDERS`, `NameEscapeError`,
`confined_relative`, `detect_family`, `load_saved_roots`, `save_roots`, `roots_from_env`. May import: stdlib,
memory.paths, pipelines.weight_format, pipelines.diffusion.family_detect (the family registry's detector;
`detect_family` is re-exported from it).

A root is ComfyUI-style when it has any of ComfyUI's model sub-folders (`checkpoints`, `diffusion_models`
or `unet`, `text_encoders` or `clip`, `vae`, `loras`, `controlnet`, `upscale_models`, `embeddings`), or
when it is a ComfyUI install with such a `models/` folder; otherwise it is flat and every file under it
counts. A workflow names a model relative to a root (`sd15/dreamshaper.safetensors`); the library is an
object handed in (no module state). Family detection reads the safetensors header only (tensor names
and shapes, through `safe_open`), never the weights; the format comes from the file's first bytes, as the
loaders decide it (`pipelines.weight_format`), never from its name.

Names that come from another tool's file (a ComfyUI workflow, a PNG's chunks, a server request) are looked
up with `find_inside` / `find_input`: the name must be relative without `..`, and the file it reaches, links
followed, must lie inside one of the roots (or a ComfyUI install's `input/` folder beside a root).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memory.paths import user_data_dir
from pipelines.diffusion.family_detect import detect_family  # noqa: F401 (re-exported)
from pipelines.weight_format import DamagedWeightsError, sniff_weight_format

# Our kind -> the ComfyUI sub-folders holding it, first the current name then the legacy one.
KIND_FOLDERS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("checkpoints",),
    "diffusion_models": ("diffusion_models", "unet"),
    "text_encoders": ("text_encoders", "clip"),
    "vae": ("vae",),
    "loras": ("loras",),
    "controlnet": ("controlnet",),
    "upscale_models": ("upscale_models",),
    "embeddings": ("embeddings",),
    "clip_vision": ("clip_vision",),
    "latent_upscale_models": ("latent_upscale_models",),  # LTX-2's latent upsamplers
}
MODEL_KINDS: tuple[str, ...] = tuple(KIND_FOLDERS)
MODEL_SUFFIXES = (".safetensors", ".gguf", ".ckpt", ".pt", ".pth", ".bin", ".sft")
ROOTS_ENV = "NODELOOM_MODELS_DIRS"
_SETTINGS_FILE = "models-library.json"


class NameEscapeError(ValueError):
    """A name from another tool's file that would reach a file outside the folders it is confined to."""


def confined_relative(name: str, where: str, shown: str | None = None) -> Path:
    """`name` as a relative path that cannot climb out of a folder, or NameEscapeError saying why.

    `where` is what the name must stay inside ("the models folders"); `shown` the value as written, when it
    is more than `name` (`builtin:../x`)."""
    shown = shown or name
    relative = Path(name)
    if relative.is_absolute() or relative.anchor or name.startswith("~"):  # anchor: Windows' `C:x`
        raise NameEscapeError(f"{shown!r} is an absolute path: it must name a file inside {where}")
    if ".." in relative.parts:
        raise NameEscapeError(f"{shown!r} climbs out of {where} with '..'")
    if not relative.parts:
        raise NameEscapeError(f"{shown!r} names no file inside {where}")
    return relative


def _inside(path: Path, folders: Iterable[Path]) -> bool:
    real = path.resolve()  # every link on the way followed
    return any(real.is_relative_to(folder.resolve()) for folder in folders)


@dataclass(frozen=True)
class ModelEntry:
    name: str  # relative to its root (for a ComfyUI root: relative to the kind's sub-folder)
    path: Path
    root: Path
    kind: str  # one of MODEL_KINDS, or "" for a flat root
    size: int
    format: str  # by content: "safetensors", "gguf", "torch-zip", "pickle", "unknown", "damaged", "diffusers"
    family: str  # "sd", "sdxl", "sd3", "flux", ... or "?" when the header does not tell


def _has_kind_folders(folder: Path) -> bool:
    return any((folder / sub).is_dir() for subs in KIND_FOLDERS.values() for sub in subs)


def _format(path: Path) -> str:
    """The format by content, as the loaders decide it: a torch zip named `.safetensors` is not listed as one."""
    if path.is_dir():
        return "diffusers"
    try:
        return sniff_weight_format(path).value
    except DamagedWeightsError:
        return "damaged"
    except OSError:
        return "unreadable"


class ModelsLibrary:
    """Model roots in search order. Cheap to build; listing walks the folders."""

    def __init__(self, roots: Iterable[Path | str] = ()) -> None:
        resolved: list[Path] = []
        for root in roots:
            path = Path(root).expanduser()
            # A ComfyUI install: its models live in models/.
            if not _has_kind_folders(path) and _has_kind_folders(path / "models"):
                path = path / "models"
            if path not in resolved:
                resolved.append(path)
        self.roots: tuple[Path, ...] = tuple(resolved)

    def __bool__(self) -> bool:
        return bool(self.roots)

    def is_comfy_root(self, root: Path) -> bool:
        return _has_kind_folders(root)

    def search_folders(self, kinds: Iterable[str] | None = None) -> list[Path]:
        """Where a name is looked up, in order: per root, the kind's sub-folders (ComfyUI) or the root."""
        wanted = list(kinds) if kinds else list(MODEL_KINDS)
        folders: list[Path] = []
        for root in self.roots:
            if self.is_comfy_root(root):
                folders.extend(root / sub for kind in wanted for sub in KIND_FOLDERS.get(kind, ()))
            else:
                folders.append(root)
        return folders

    def find(self, name: str, kinds: Iterable[str] | None = None) -> Path | None:
        """The file or folder a relative name means, or None. Never leaves a root (no '..', no absolute)."""
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts:
            return None
        for folder in self.search_folders(kinds):
            candidate = folder / relative
            if candidate.exists():
                return candidate
        return None

    def find_inside(self, name: str, kinds: Iterable[str] | None = None) -> Path | None:
        """`find` for a name from another tool's file: NameEscapeError when the name is absolute or has
        '..', or when the file found is a link (or lies under one) leading out of every root."""
        relative = confined_relative(name, "the models folders")
        for folder in self.search_folders(kinds):
            candidate = folder / relative
            if candidate.exists():
                if not _inside(candidate, self.roots):
                    raise NameEscapeError(
                        f"{name!r} is a link to {candidate.resolve()}, outside the models folders "
                        f"({', '.join(map(str, self.roots))})"
                    )
                return candidate
        return None

    def input_folders(self) -> list[Path]:
        """Where a picture named by a ComfyUI LoadImage is looked up: the `input/` folder of each ComfyUI
        install among the roots (beside its `models/`), then the roots themselves."""
        folders: list[Path] = []
        for root in self.roots:
            for install in (root.parent, root) if root.name == "models" else (root,):
                if (install / "input").is_dir() and install / "input" not in folders:
                    folders.append(install / "input")
        return folders + [r for r in self.roots if r not in folders]

    def find_input(self, name: str) -> Path | None:
        """A picture named by another tool's file, confined like `find_inside` to `input_folders()`."""
        where = "ComfyUI's input folder and the models folders"
        relative = confined_relative(name, where)
        folders = self.input_folders()
        for folder in folders:
            candidate = folder / relative
            if candidate.is_file():
                if not _inside(candidate, folders):
                    raise NameEscapeError(f"{name!r} is a link to {candidate.resolve()}, outside {where}")
                return candidate
        return None

    def not_found_message(self, name: str, kinds: Iterable[str] | None = None) -> str:
        folders = [str(f) for f in self.search_folders(kinds)]
        if not folders:
            return f"model {name!r} not found: it is not a path, and no models folder is set (--models-dir)"
        return f"model {name!r} not found; searched: {', '.join(folders)}"

    def _walk(self, folder: Path) -> Iterator[Path]:
        if not folder.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(folder):
            here = Path(dirpath)
            dirnames.sort()
            for d in list(dirnames):
                if any((here / d / n).is_file() for n in ("model_index.json", "modular_model_index.json")):
                    # a diffusers folder (or a modular pipeline's) is one model
                    dirnames.remove(d)
                    yield here / d
            for f in sorted(filenames):
                if f.lower().endswith(MODEL_SUFFIXES):
                    yield here / f

    def files(self, kinds: Iterable[str] | None = None) -> list[tuple[str, Path]]:
        """Every model in the folders searched for `kinds`: (the name a workflow may use, its path). Reads no
        headers, so it is cheap enough to fill a picker each time it opens."""
        return [(p.relative_to(f).as_posix(), p) for f in self.search_folders(kinds) for p in self._walk(f)]

    def entries(self) -> list[ModelEntry]:
        out: list[ModelEntry] = []
        for root in self.roots:
            places = (
                [(kind, root / sub) for kind, subs in KIND_FOLDERS.items() for sub in subs]
                if self.is_comfy_root(root)
                else [("", root)]
            )
            for kind, folder in places:
                for path in self._walk(folder):
                    size = (
                        sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
                        if path.is_dir()
                        else path.stat().st_size
                    )
                    out.append(
                        ModelEntry(
                            name=path.relative_to(folder).as_posix(),
                            path=path,
                            root=root,
                            kind=kind,
                            size=size,
                            format=_format(path),
                            family=detect_family(path) or "?",
                        )
                    )
        return out


def roots_from_env() -> list[Path]:
    value = os.environ.get(ROOTS_ENV, "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


def _settings_path() -> Path:
    return user_data_dir() / _SETTINGS_FILE


def load_saved_roots() -> list[Path]:
    """The roots saved as a setting (`app models add-root`), oldest first."""
    try:
        data = json.loads(_settings_path().read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    roots = data.get("roots") if isinstance(data, dict) else None
    return [Path(r) for r in roots if isinstance(r, str)] if isinstance(roots, list) else []


def save_roots(roots: Iterable[Path], write_text: Callable[[Path, str], None]) -> Path:
    """Save the roots setting with `write_text`: the app's atomic writer (`nodes.files.atomic_write_text`,
    which pipelines/ cannot import), so two processes saving at once or a full disk never leave a torn file."""
    path = _settings_path()
    write_text(path, json.dumps({"roots": [str(r) for r in roots]}, indent=2) + "\n")
    return path
