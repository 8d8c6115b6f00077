"""Weight facts: exact byte counts from safetensors headers and from modules, block discovery, key mapping.

May import: stdlib, torch, safetensors.
Headers are parsed by hand (`read_header`: the 8-byte length and the JSON), never touching tensor data.
`file_ranges` / `drop_file_pages`: where each tensor's bytes lie in its file, and telling the kernel a read
range is not needed again (streaming drops each block's pages once it ran, so a file larger than RAM streams
without filling memory with its cache).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

import torch
from safetensors import safe_open

from memory.estimates import element_size

# safetensors dtype tags -> element size in bytes (format spec: https://github.com/huggingface/safetensors).
TAG_SIZE = MappingProxyType({
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
})  # fmt: skip
FLOAT_TAGS = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def read_header(path: Path) -> dict[str, dict]:
    """A safetensors file's JSON header (key -> dtype, shape, data_offsets), read with two small reads.

    Not `safe_open`: torch's pt backend maps the whole file privately and writable on open, which the
    kernel refuses for a file larger than RAM + swap (ENOMEM), and a header needs none of the data."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if not 2 <= length <= 100 * 2**20:
            raise ValueError(f"{Path(path).name}: not a safetensors header (length {length})")
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header


def header_entries(files: Iterable[Path]) -> Iterator[tuple[Path, str, str, tuple[int, ...]]]:
    """(file, key, dtype tag, shape) for every tensor in the files, from their headers only (keys sorted,
    as `safe_open` lists them)."""
    for path in files:
        header = read_header(path)
        for key in sorted(header):
            yield Path(path), key, header[key]["dtype"], tuple(header[key]["shape"])


def header_bytes(
    files: Iterable[Path], dtype: torch.dtype | None = None, prefixes: tuple[str, ...] = ()
) -> int:
    """Exact bytes of the weights in `files` once loaded at `dtype` (floating tensors cast; others as stored).

    With `prefixes`, only keys starting with one of them count (one component of a single-file checkpoint).
    """
    return sum(n for key, n in header_tensor_bytes(files, dtype) if not prefixes or key.startswith(prefixes))


def header_tensor_bytes(files: Iterable[Path], dtype: torch.dtype | None = None) -> Iterator[tuple[str, int]]:
    """(key, bytes once loaded at `dtype`) for every tensor in the files, from their headers only."""
    target = element_size(dtype) if dtype is not None else None
    for _, key, tag, shape in header_entries(files):
        size = target if (target is not None and tag in FLOAT_TAGS) else TAG_SIZE[tag]
        yield key, _numel(shape) * size


def named_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Parameters then buffers, each storage once (tied weights are counted once, as they are stored once)."""
    seen: set[int] = set()
    for name, t in list(module.named_parameters(remove_duplicate=False)) + list(
        module.named_buffers(remove_duplicate=False)
    ):
        if id(t) in seen:
            continue
        seen.add(id(t))
        yield name, t


def tensor_bytes(t: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    if dtype is not None and t.is_floating_point():
        return t.numel() * element_size(dtype)
    return t.numel() * t.element_size()


def module_bytes(module: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of a module's parameters and buffers at `dtype` (floating tensors) or as they are."""
    return sum(tensor_bytes(t, dtype) for _, t in named_tensors(module))


def block_names(module: torch.nn.Module, paths: Iterable[str]) -> list[str]:
    """Expand ModuleList paths ("down_blocks", "model.layers") into item paths in declaration order."""
    names: list[str] = []
    for path in paths:
        blocks = module.get_submodule(path)
        if not isinstance(blocks, torch.nn.ModuleList | torch.nn.Sequential):
            raise TypeError(f"{path!r} is a {type(blocks).__name__}, not a ModuleList; it cannot be streamed")
        names.extend(f"{path}.{i}" for i in range(len(blocks)))
    return names


def map_keys(names: Iterable[str], files: Iterable[Path]) -> dict[str, tuple[Path, str]]:
    """Map module tensor names to (file, key) in the safetensors files.

    Files and modules disagree about prefixes (transformers 5 saves CLIPTextModel without `text_model.`;
    older files have it), so a name matches a key when one equals the other with leading dotted components
    stripped. The shortest stripping wins; an ambiguous or missing name raises.
    """
    by_key: dict[str, tuple[Path, str]] = {}
    for path, key, _, _ in header_entries(files):
        by_key[key] = (path, key)
    suffixes: dict[str, list[str]] = {}
    for key in by_key:
        parts = key.split(".")
        for i in range(len(parts)):
            suffixes.setdefault(".".join(parts[i:]), []).append(key)
    out: dict[str, tuple[Path, str]] = {}
    for name in names:
        parts = name.split(".")
        found = None
        for i in range(len(parts)):
            candidates = suffixes.get(".".join(parts[i:]), [])
            if len(candidates) == 1:
                found = candidates[0]
                break
            if len(candidates) > 1:
                exact = [c for c in candidates if c == ".".join(parts[i:])]
                if len(exact) == 1:
                    found = exact[0]
                    break
                raise KeyError(f"{name!r} matches several tensors in the files: {candidates[:3]}")
        if found is None:
            raise KeyError(f"{name!r} is not in the component's safetensors files")
        out[name] = by_key[found]
    return out


# -- sources: filling an empty module tensor by tensor -------------------------------------------------------


def tensor_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """File key -> (start, end) byte offsets of its data in a safetensors file, from the header (8-byte little
    endian length, the JSON header, then the data, whose `data_offsets` count from the header's end)."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    base = 8 + length
    return {
        k: (base + v["data_offsets"][0], base + v["data_offsets"][1])
        for k, v in header.items()
        if k != "__metadata__"
    }


def drop_file_pages(ranges: Iterable[tuple[Path, int, int]]) -> None:
    """`posix_fadvise(POSIX_FADV_DONTNEED)` over each (file, start, end): the kernel drops those pages from its
    cache once no mapping holds them. For a streamed block, read once per step: keeping its pages would fill
    RAM with the file (page cache is not RSS, but it is what a file bigger than RAM must not take) and push
    out everything else's. Adjacent ranges are merged; a platform without fadvise is left as it is."""
    if not hasattr(os, "posix_fadvise"):
        return
    spans: dict[Path, list[tuple[int, int]]] = {}
    for path, start, end in ranges:
        spans.setdefault(Path(path), []).append((start, end))
    for path, parts in spans.items():
        merged: list[list[int]] = []
        for start, end in sorted(parts):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        fd = os.open(path, os.O_RDONLY)
        try:
            for start, end in merged:
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class WeightSource(Protocol):
    """The weights of one component, by module tensor name ("down_blocks.0.resnets.0.conv1.weight")."""

    def nbytes(self, dtype: torch.dtype) -> int:
        """Exact bytes of every tensor it provides once loaded at `dtype` (floating tensors cast)."""
        ...

    def load(self, names: Sequence[str], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield `(name, tensor)` for `names`, in order, on CPU, floating tensors at `dtype`.

        One at a time: the caller places each before asking for the next, so a whole-module load holds at
        most one tensor beyond the module itself.
        """
        ...

    # Optional: `file_ranges(names) -> list[(file, start, end)]`, the bytes `load(names)` reads; streaming
    # drops their cached pages after each block (`drop_file_pages`).


# safe_open maps the whole file once per handle and slices tensors out of that mapping: every page read stays
# in RSS until the handle closes (measured: dropping the tensor alone frees nothing). Reopening after an
# eighth of what a load reads (4-64 MiB) bounds that transient; an open costs ~5 us per tensor in the file
# (~6 ms for an SD 1.5 single file), so reopening per tensor would cost more than the reads.
REOPEN_BYTES = 64 * 1024**2


def reopen_bytes(total: int) -> int:
    """How many bytes to read through one file handle when a load reads `total` bytes in all."""
    return min(REOPEN_BYTES, max(total // 8, 4 * 1024**2))


def read_tensors(
    plan: Iterable[tuple[str, Path, str]], dtype: torch.dtype | None, reopen: int = REOPEN_BYTES
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(name, tensor)` for each `(name, file, key)` in `plan`, cast to `dtype` when floating.

    A tensor already at `dtype` is returned memory-mapped (no copy, like `from_pretrained`); others are cast
    and the mapping is dropped with the handle, after every `reopen` bytes read.
    """
    handle = None
    opened: Path | None = None
    since = 0
    try:
        for name, path, key in plan:
            if handle is None or opened != path or since >= reopen:
                if handle is not None:
                    handle.__exit__(None, None, None)
                handle = _open(path)
                opened, since = path, 0
            t = handle.get_tensor(key)
            since += t.numel() * t.element_size()
            yield name, cast(t, dtype)
    finally:
        if handle is not None:
            handle.__exit__(None, None, None)


class _PreadFile:
    """`safe_open`'s `get_tensor` by `os.pread` into a fresh buffer: for a file the kernel will not map whole
    (larger than RAM + swap, see `read_header`). A tensor is a copy, never a view of a mapping."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offsets = tensor_offsets(self.path)
        self.header = read_header(self.path)
        self.fd = os.open(self.path, os.O_RDONLY)

    def get_tensor(self, key: str) -> torch.Tensor:
        start, end = self.offsets[key]
        entry = self.header[key]
        buf = bytearray(end - start)
        view, done = memoryview(buf), 0
        while done < len(buf):
            n = os.preadv(self.fd, [view[done:]], start + done)
            if n <= 0:
                raise OSError(f"{self.path.name}: {key} is cut short at byte {start + done}")
            done += n
        dtype = _TAG_DTYPE[entry["dtype"]]
        flat = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        return flat.reshape(entry["shape"])

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _open(path: Path):  # noqa: ANN202 - a safe_open handle or a _PreadFile: both have get_tensor / __exit__
    try:
        return safe_open(str(path), framework="pt").__enter__()
    except RuntimeError as exc:  # torch's "unable to mmap N bytes ... Cannot allocate memory"
        if "mmap" not in str(exc):
            raise
        return _PreadFile(path)


_TAG_DTYPE = MappingProxyType({
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
})  # fmt: skip


def cast(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Floating tensors to `dtype` (integer buffers keep theirs), contiguous."""
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        t = t.to(dtype)
    return t.contiguous()


class SafetensorsSource:
    """Safetensors files whose keys are the module's names (up to a leading prefix, see `map_keys`)."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.files = tuple(Path(f) for f in files)
        self._where: dict[str, tuple[Path, str]] = {}
        self._stored: dict[str, int] = {}
        self._offsets: dict[Path, dict[str, tuple[int, int]]] = {}

    def nbytes(self, dtype: torch.dtype) -> int:
        return header_bytes(self.files, dtype)

    def load(self, names: Sequence[str], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        missing = [n for n in names if n not in self._where]
        if missing:
            self._where.update(map_keys(missing, self.files))
            for _, key, tag, shape in header_entries(self.files):
                self._stored[key] = _numel(shape) * TAG_SIZE[tag]
        reopen = reopen_bytes(sum(self._stored[self._where[n][1]] for n in names))
        yield from read_tensors(((n, *self._where[n]) for n in names), dtype, reopen)

    def file_ranges(self, names: Sequence[str]) -> list[tuple[Path, int, int]]:
        """Where the bytes of `names` lie in the files."""
        missing = [n for n in names if n not in self._where]
        if missing:
            self._where.update(map_keys(missing, self.files))
        out = []
        for n in names:
            path, key = self._where[n]
            if path not in self._offsets:
                self._offsets[path] = tensor_offsets(path)
            out.append((path, *self._offsets[path][key]))
        return out


def empty_tensor_names(module: torch.nn.Module) -> list[str]:
    """Names of the parameters and persistent buffers still on the meta device (not loaded yet)."""
    return [name for name, t in module.state_dict(keep_vars=True).items() if t.is_meta]


def assign_tensor(module: torch.nn.Module, name: str, t: torch.Tensor) -> None:
    """Put `t` in place of the parameter or buffer `name`, keeping it a Parameter when it was one."""
    owner_name, _, attr = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    if attr in owner._parameters:
        old = owner._parameters[attr]
        requires_grad = old.requires_grad if old is not None else False
        owner._parameters[attr] = torch.nn.Parameter(t, requires_grad=requires_grad and t.is_floating_point())
    elif attr in owner._buffers:
        owner._buffers[attr] = t
    else:
        raise KeyError(f"{name!r} is not a parameter or buffer of {type(module).__name__}")


def fill_empty(
    module: torch.nn.Module, source: WeightSource, dtype: torch.dtype, names: Sequence[str] | None = None
) -> int:
    """Load every meta tensor of `module` (or `names`) from `source`, one at a time. Returns bytes loaded."""
    todo = empty_tensor_names(module) if names is None else list(names)
    loaded = 0
    for name, t in source.load(todo, dtype):
        assign_tensor(module, name, t)
        loaded += t.numel() * t.element_size()
    left = empty_tensor_names(module) if names is None else []
    if left:
        raise KeyError(f"{type(module).__name__}: no weights for {left[:3]} ({len(left)} tensors)")
    return loaded
