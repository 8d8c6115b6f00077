"""A cheap walk over a GGUF file's header: every declared size checked against the file's size, and what the
header says (scalar metadata, array lengths, the tensor table) without gguf-py's parse.

Lives here: `gguf_header_problem`, `read_gguf_header`, `GGUFHeader`, `GGUFTensorInfo`, `STRING_TYPE`. Imports
only the standard library; `GGUFTensorInfo.n_bytes` takes gguf-py's block table (`gguf.constants`) when asked.

`gguf.GGUFReader` believes the counts it reads: an array declared with 2^60 items is read item by item
(each read past the end gives an empty view, so the loop never fails and only grows), a string of 2^60
bytes is sliced, a tensor with 2^32 dimensions is listed. Walking the same header with `struct` first costs
one pass over the metadata (~80 ms for SmolLM2's 49k-token vocabulary on this machine, against ~0.7 s for
the reader's) and refuses any count whose smallest possible encoding would not fit in the bytes left, before
the reader sees the file. The same pass keeps what a plan needs of the file (`read_gguf_header`).
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

# GGUF value types (gguf.GGUFValueType) -> encoded size and struct code; strings and arrays are variable.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MIN_SIZE = {**_SCALAR_SIZES, _STRING: 8, _ARRAY: 12}  # the least bytes one item of a type can take
_MAX_DIMS = 8  # llama.cpp allows 4 (GGML_MAX_DIMS); a few more cost nothing, 2^32 would
_MAX_NESTING = 8  # arrays of arrays: nothing writes more than two levels
_HEADER = 24  # magic, version, tensor count, key/value count
_ALIGNMENT = 32  # gguf's GGUF_DEFAULT_ALIGNMENT, when `general.alignment` does not say
STRING_TYPE = _STRING  # an array of strings: gguf-py makes two views of each item


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor table: `dims` in GGUF's order (ne: fastest first, as `ReaderTensor.shape`)."""

    name: str
    dims: tuple[int, ...]
    type: int  # gguf.GGMLQuantizationType's value
    offset: int  # from the start of the tensor data

    @property
    def n_elements(self) -> int:
        return math.prod(self.dims)

    def n_bytes(self) -> int:
        """Bytes it takes in the file, from gguf-py's block table (as `ReaderTensor.n_bytes`)."""
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.type)]
        return self.n_elements * size // block


@dataclass
class GGUFHeader:
    """What the header declares: scalar metadata, each array's item type and length, the tensor table."""

    metadata: dict[str, str | int | float | bool] = field(default_factory=dict)  # scalar values only
    arrays: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (item type, items)
    tensors: list[GGUFTensorInfo] = field(default_factory=list)
    data_offset: int = 0  # where the tensor data starts (the header's end, aligned)
    file_size: int = 0


class _Bad(Exception):
    pass


class _Walk:
    """A cursor over the file's bytes that refuses to read past the end."""

    def __init__(self, buf: mmap.mmap | bytes, order: str) -> None:
        self.buf, self.order, self.offs = buf, order, 0

    def need(self, nbytes: int, what: str) -> None:
        left = len(self.buf) - self.offs
        if nbytes > left:
            raise _Bad(f"{what}: {nbytes:,} bytes needed at offset {self.offs:,}, only {left:,} follow")

    def unpack(self, fmt: str, what: str) -> int:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.offs)
        self.offs += size
        return int(value)

    def string(self, what: str, *, keep: int = 200) -> str:
        """Skip a string; return its first `keep` bytes as text (200: enough for a message; 0: none)."""
        length = self.unpack("Q", what)
        self.need(length, f"{what} ({length:,} bytes)")
        text = (
            bytes(self.buf[self.offs : self.offs + min(length, keep)]).decode("utf-8", "replace")
            if keep
            else ""
        )
        self.offs += length
        return text

    def value(self, vtype: int, key: str, depth: int = 0) -> None:
        if vtype in _SCALAR_SIZES:
            self.need(_SCALAR_SIZES[vtype], f"the value of {key!r}")
            self.offs += _SCALAR_SIZES[vtype]
        elif vtype == _STRING:
            self.string(f"a string in {key!r}", keep=0)
        elif vtype == _ARRAY:
            self.array(key, depth)
        else:
            raise _Bad(f"{key!r} has unknown value type {vtype}")

    def array(self, key: str, depth: int = 0) -> tuple[int, int]:
        """Skip an array; its (item type, items)."""
        if depth >= _MAX_NESTING:
            raise _Bad(f"{key!r} nests arrays more than {_MAX_NESTING} deep")
        itype = self.unpack("I", f"the array {key!r}")
        count = self.unpack("Q", f"the array {key!r}")
        if itype not in _MIN_SIZE:
            raise _Bad(f"the array {key!r} has items of unknown type {itype}")
        self.need(count * _MIN_SIZE[itype], f"the array {key!r} of {count:,} items")
        if itype in _SCALAR_SIZES:
            self.offs += count * _SCALAR_SIZES[itype]
        else:
            for _ in range(count):
                self.value(itype, key, depth + 1)
        return itype, count

    def scalar(self, vtype: int, key: str) -> str | int | float | bool:
        if vtype == _STRING:
            return self.string(f"the value of {key!r}", keep=1 << 20)  # a chat template is a few KiB
        self.need(_SCALAR_SIZES[vtype], f"the value of {key!r}")
        (value,) = struct.unpack_from(self.order + _SCALAR_CODES[vtype], self.buf, self.offs)
        self.offs += _SCALAR_SIZES[vtype]
        return value


def _walk(buf: mmap.mmap, size: int) -> GGUFHeader:
    if buf[:4] != b"GGUF":
        raise _Bad("the file does not start with the GGUF magic")
    # GGUFReader's test: a version whose low half is 0 was written in the other byte order.
    order = ">" if struct.unpack_from("<I", buf, 4)[0] & 0xFFFF == 0 else "<"
    walk = _Walk(buf, order)
    walk.offs = 8
    header = GGUFHeader(file_size=size)
    n_tensors = walk.unpack("Q", "the tensor count")
    n_kv = walk.unpack("Q", "the key count")
    walk.need(n_kv * 13, f"{n_kv:,} metadata keys")  # key length 8 + type 4 + 1 byte at least
    for _ in range(n_kv):
        key = walk.string("a metadata key")
        vtype = walk.unpack("I", f"the type of {key!r}")
        if vtype == _ARRAY:
            header.arrays[key] = walk.array(key)
        elif vtype in _SCALAR_SIZES or vtype == _STRING:
            header.metadata[key] = walk.scalar(vtype, key)
        else:
            raise _Bad(f"{key!r} has unknown value type {vtype}")
    walk.need(n_tensors * 24, f"{n_tensors:,} tensor entries")  # name 8, dims 4, type 4, offset 8
    for _ in range(n_tensors):
        name = walk.string("a tensor name")
        n_dims = walk.unpack("I", f"tensor {name!r}")
        if n_dims > _MAX_DIMS:
            raise _Bad(f"tensor {name!r} declares {n_dims:,} dimensions (at most {_MAX_DIMS})")
        walk.need(n_dims * 8 + 12, f"tensor {name!r}")
        dims = tuple(walk.unpack("Q", f"tensor {name!r}") for _ in range(n_dims))
        ttype = walk.unpack("I", f"tensor {name!r}")
        header.tensors.append(GGUFTensorInfo(name, dims, ttype, walk.unpack("Q", f"tensor {name!r}")))
    alignment = header.metadata.get("general.alignment", _ALIGNMENT)
    alignment = alignment if isinstance(alignment, int) and alignment > 0 else _ALIGNMENT
    header.data_offset = -(-walk.offs // alignment) * alignment
    return header


def _read(path: Path) -> tuple[GGUFHeader | None, str | None]:
    with Path(path).open("rb") as f:
        size = f.seek(0, 2)
        if size < _HEADER:
            return None, f"the file has {size} bytes, fewer than a GGUF header's {_HEADER}"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _walk(buf, size), None
            except _Bad as exc:
                return None, str(exc)


def gguf_header_problem(path: Path) -> str | None:
    """Why `path`'s GGUF header cannot be what it claims (a size past the end of the file), or None."""
    return _read(path)[1]


def read_gguf_header(path: Path) -> GGUFHeader:
    """What `path`'s header declares; ValueError naming the file when it cannot be what it claims."""
    header, problem = _read(path)
    if header is None:
        raise ValueError(f"{Path(path).name}: {problem}")
    return header
