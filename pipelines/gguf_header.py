"""A cheap walk over a GGUF file's header that checks every declared size against the file's size.

Lives here: `gguf_header_problem`. Imports only the standard library.

`gguf.GGUFReader` believes the counts it reads: an array declared with 2^60 items is read item by item
(each read past the end gives an empty view, so the loop never fails and only grows), a string of 2^60
bytes is sliced, a tensor with 2^32 dimensions is listed. Walking the same header with `struct` first costs
one pass over the metadata (a few ms for a 49k-token vocabulary) and refuses any count whose smallest
possible encoding would not fit in the bytes left, before the reader sees the file.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

# GGUF value types (gguf.GGUFValueType) -> encoded size; strings and arrays are variable.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MIN_SIZE = {**_SCALAR_SIZES, _STRING: 8, _ARRAY: 12}  # the least bytes one item of a type can take
_MAX_DIMS = 8  # llama.cpp allows 4 (GGML_MAX_DIMS); a few more cost nothing, 2^32 would
_MAX_NESTING = 8  # arrays of arrays: nothing writes more than two levels
_HEADER = 24  # magic, version, tensor count, key/value count


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

    def string(self, what: str, *, keep: bool = True) -> str:
        """Skip a string; return its text (cut at 200 bytes, for messages) when `keep`."""
        length = self.unpack("Q", what)
        self.need(length, f"{what} ({length:,} bytes)")
        text = (
            bytes(self.buf[self.offs : self.offs + min(length, 200)]).decode("utf-8", "replace")
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
            self.string(f"a string in {key!r}", keep=False)
        elif vtype == _ARRAY:
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
        else:
            raise _Bad(f"{key!r} has unknown value type {vtype}")


def gguf_header_problem(path: Path) -> str | None:
    """Why `path`'s GGUF header cannot be what it claims (a size past the end of the file), or None."""
    with Path(path).open("rb") as f:
        size = f.seek(0, 2)
        if size < _HEADER:
            return f"the file has {size} bytes, fewer than a GGUF header's {_HEADER}"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != b"GGUF":
                return "the file does not start with the GGUF magic"
            # GGUFReader's test: a version whose low half is 0 was written in the other byte order.
            order = ">" if struct.unpack_from("<I", buf, 4)[0] & 0xFFFF == 0 else "<"
            walk = _Walk(buf, order)
            walk.offs = 8
            try:
                n_tensors = walk.unpack("Q", "the tensor count")
                n_kv = walk.unpack("Q", "the key count")
                walk.need(n_kv * 13, f"{n_kv:,} metadata keys")  # key length 8 + type 4 + 1 byte at least
                for _ in range(n_kv):
                    key = walk.string("a metadata key")
                    walk.value(walk.unpack("I", f"the type of {key!r}"), key)
                walk.need(n_tensors * 24, f"{n_tensors:,} tensor entries")  # name 8, dims 4, type 4, offset 8
                for _ in range(n_tensors):
                    name = walk.string("a tensor name")
                    n_dims = walk.unpack("I", f"tensor {name!r}")
                    if n_dims > _MAX_DIMS:
                        raise _Bad(f"tensor {name!r} declares {n_dims:,} dimensions (at most {_MAX_DIMS})")
                    walk.need(n_dims * 8 + 12, f"tensor {name!r}")
                    walk.offs += n_dims * 8 + 12
            except _Bad as exc:
                return str(exc)
    return None
