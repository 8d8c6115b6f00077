"""Files a request reaches: `/view` reads and `/upload/image` writes, each inside its own folder.

Lives here: `FileRefused`, `folder_for`, `view_path`, `save_upload`. Imports `nodes.files` (atomic writes),
`pipelines.models_library` (`confined_relative`: the rule imported names follow), PIL.

A name from a request is relative, without `..`, and the file it reaches, links followed, lies inside the
folder its `type` names (output, input, temp); anything else is refused before any file is opened. An
upload must be a picture PIL can read (it is only ever read back as one, by LoadImage).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from nodes.files import atomic_write_bytes
from pipelines.models_library import NameEscapeError, confined_relative

_MAX_NAME_BYTES = 255  # one file or folder name, as Linux, macOS and Windows file systems allow


class FileRefused(Exception):
    """A request's file name or content that is refused; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def folder_for(kind: str | None, folders: dict[str, Path], default: str) -> tuple[str, Path]:
    kind = kind or default
    if kind not in folders:
        raise FileRefused(400, f"type {kind!r}: expected one of {', '.join(folders)}")
    return kind, folders[kind]


def _inside(folder: Path, subfolder: str, filename: str) -> Path:
    """`folder/subfolder/filename`, or FileRefused when the name would leave `folder` (links followed)."""
    if not filename or "/" in filename or "\\" in filename:
        raise FileRefused(
            400, f"filename {filename!r}: a plain file name is expected (use subfolder for folders)"
        )
    if "\x00" in filename or "\x00" in subfolder:
        raise FileRefused(400, "a file name may not hold a NUL character")
    parts = [*subfolder.replace("\\", "/").split("/"), filename]
    if any(len(part.encode()) > _MAX_NAME_BYTES for part in parts):  # the OS would refuse it (ENAMETOOLONG)
        raise FileRefused(400, f"a file or folder name is over {_MAX_NAME_BYTES} bytes")
    where = f"the {folder.name} folder"
    try:
        relative = confined_relative(f"{subfolder}/{filename}" if subfolder else filename, where)
    except NameEscapeError as exc:
        raise FileRefused(403, str(exc)) from None
    path = folder / relative
    real_folder = folder.resolve()
    try:
        real = path.resolve()
    except OSError as exc:  # a link loop, a path the OS will not take
        raise FileRefused(400, f"{relative.as_posix()!r}: {exc.strerror or exc}") from None
    if not real.is_relative_to(real_folder):
        raise FileRefused(403, f"{relative.as_posix()!r} is a link out of {where}")
    return path


def view_path(folder: Path, subfolder: str, filename: str) -> Path:
    path = _inside(folder, subfolder, filename)
    if not path.is_file():
        raise FileRefused(404, f"no file {filename!r} in that folder")
    return path


def save_upload(folder: Path, subfolder: str, filename: str, data: bytes, overwrite: bool) -> tuple[str, str]:
    """Write an uploaded picture; returns (name, subfolder) as ComfyUI answers. Without `overwrite` a taken
    name gets ` (1)`, ` (2)`... unless the file there has the same bytes (then it is reused)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise FileRefused(400, f"{filename!r} is not a picture this server can read ({exc})") from None
    path = _inside(folder, subfolder, filename)
    if not overwrite:
        stem, suffix, n = path.stem, path.suffix, 1
        digest = hashlib.sha256(data).digest()
        while path.exists():
            if path.is_file() and hashlib.sha256(path.read_bytes()).digest() == digest:
                return path.name, subfolder
            path = _inside(folder, subfolder, f"{stem} ({n}){suffix}")
            n += 1
    atomic_write_bytes(path, data)
    return path.name, subfolder
