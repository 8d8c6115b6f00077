"""Ledger keys: the one builder of a model component's key and of the key its learned peaks are kept under.

Lives here: `ComponentKeys`, `component_keys`, `precision_label`, `files_identity`. May import: stdlib.

One convention, `<source>#<part>@<precision>`: `source` is the file or folder as given (two copies of a model
are two entries in one session's ledger), `part` names the component ("unet", "text_encoder_2", "llm"),
and `precision` is the dtype's own name ("float32", "bfloat16") or a storage label ("fp8_e4m3fn", "gguf"),
never torch's "torch.float32"; it is left out (with its "@") for components that have none.

The peak key is the same with `source` replaced by what the files are, not where they are: the first file's
name, then a hash of every file's name, size and safetensors header (the first 64 KiB of any other file).
Learned working-memory peaks (`memory.learned`, through `ComponentSpec.peak_key`) are stored under it, so a
models folder moved, copied to another machine or mounted elsewhere keeps what was measured for it. Peaks
recorded before (under absolute-path keys) no longer match and are measured again on the next run.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Far larger than any safetensors header of a real model's component (tensor names and shapes); a file
# claiming more is hashed by its first bytes like any other file.
_MAX_HEADER = 64 * 2**20
_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class ComponentKeys:
    key: str  # the ledger key: unique per file or folder in a session
    peak_key: str  # the same, independent of where the files live

    def spec_fields(self) -> dict[str, str]:
        """`ComponentSpec(**keys.spec_fields(), ...)`."""
        return {"key": self.key, "peak_key": self.peak_key}


def precision_label(dtype: Any = None, storage: str = "") -> str:
    """ "fp8_e4m3fn" for a quantized storage, else the dtype's name ("float32"); "" for neither."""
    if storage:
        return storage
    return str(dtype).removeprefix("torch.") if dtype is not None else ""


def _file_digest(path: Path, size: int) -> bytes:
    with path.open("rb") as f:
        head = f.read(8)
        if path.suffix.lower() in (".safetensors", ".sft") and len(head) == 8:
            (length,) = struct.unpack("<Q", head)
            if length <= min(_MAX_HEADER, size - 8):
                return hashlib.blake2b(f.read(length), digest_size=16).digest()
        return hashlib.blake2b(head + f.read(_HEAD_BYTES - 8), digest_size=16).digest()


def _members(source: Path, files: Iterable[Path]) -> list[tuple[str, Path]]:
    listed = list(files)
    if listed:
        return [(p.name, p) for p in listed]
    if source.is_dir():  # a whole folder: every file in it, by its path inside the folder
        return [(p.relative_to(source).as_posix(), p) for p in sorted(source.rglob("*")) if p.is_file()]
    return [(source.name, source)]


def files_identity(source: Path, files: Iterable[Path] = ()) -> str:
    """`<first name>~<hash>`: what `files` (default: `source` itself, or every file in a folder) hold."""
    members = _members(source, files)
    h = hashlib.blake2b(digest_size=8)
    for name, path in members:
        try:
            size = path.stat().st_size
            h.update(f"{name}\0{size}\0".encode())
            h.update(_file_digest(path, size))
        except OSError:  # unreadable now: the loader reports it; the key only has to stay the same
            h.update(f"{name}\0?\0".encode())
    first = members[0][0] if members else source.name
    return f"{first}~{h.hexdigest()}"


def component_keys(
    source: Path | str, part: str, precision: str = "", files: Iterable[Path] = (), stamp: str = ""
) -> ComponentKeys:
    """The ledger key and the peak key of component `part` of `source` (a file or folder); `files` are the
    weight files when they are fewer than everything under `source` (one subfolder of a diffusers folder).
    `stamp` (a file version, e.g. mtime and size) goes into the ledger key only: a changed file is a new
    entry, while its peak key already follows the content."""
    tail = f"#{part}" + (f"@{precision}" if precision else "")
    where = f"{source}~{stamp}" if stamp else f"{source}"
    return ComponentKeys(key=f"{where}{tail}", peak_key=f"{files_identity(Path(source), files)}{tail}")


__all__ = ["ComponentKeys", "component_keys", "files_identity", "precision_label"]
