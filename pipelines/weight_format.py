"""What a weights file really is, decided by its content, and the one gate every loader passes.

Lives here: `WeightFormat`, `sniff_weight_format`, `check_weights_format`, `load_pickle_state_dict`,
`open_gguf_reader`, `UnsafeFormatError`, `DamagedWeightsError`. Imports stdlib, safetensors, (lazily)
torch and gguf-py, and `pipelines.gguf_header` (a stdlib walk of the header).

A file name proves nothing: a pickle renamed `model.SAFETENSORS`, `model.gguf` or `model` runs its payload
the moment `torch.load(weights_only=False)` opens it. So the format comes from the bytes:

- safetensors: `safetensors.safe_open` parses the header (an 8-byte length, then a JSON object);
- GGUF: the magic `GGUF` in the first four bytes;
- anything else is treated as a pickle (a torch zip archive, a raw pickle stream, or unknown bytes), which
  is refused unless the user allowed pickles, and even then loaded with `weights_only=True` first.
"""

from __future__ import annotations

import enum
import struct
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from pipelines.gguf_header import gguf_header_problem

_GGUF_MAGIC = b"GGUF"
_ZIP_MAGIC = b"PK\x03\x04"
# A safetensors header is a JSON object; anything claiming more than this is not one (safetensors' own cap).
_MAX_HEADER = 100 * 2**20

PICKLE_HELP = (
    "Convert it to .safetensors, or allow pickle checkpoints explicitly if you trust its source: "
    "--allow-pickle on the command line, or Settings > Allow pickle checkpoints in the editor."
)


class WeightFormat(enum.StrEnum):
    SAFETENSORS = "safetensors"
    GGUF = "gguf"
    TORCH_ZIP = "torch-zip"  # what torch.save writes: a zip with a pickle inside
    PICKLE = "pickle"  # a raw pickle stream (old torch.save, pickle.dump)
    UNKNOWN = "unknown"  # none of the above: refused like a pickle, loaded like one only by opt-in

    @property
    def is_safe(self) -> bool:
        return self in (WeightFormat.SAFETENSORS, WeightFormat.GGUF)


class UnsafeFormatError(ValueError):
    """A file that is not safetensors or GGUF (a pickle can run code) was given without opt-in."""


class DamagedWeightsError(ValueError):
    """A file that says it is safetensors or GGUF but cannot be read as one (truncated, corrupt)."""


def _looks_like_safetensors(head: bytes) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 2 <= length <= _MAX_HEADER and head[8:9] == b"{"


def sniff_weight_format(path: Path) -> WeightFormat:
    """The format of `path` from its first bytes (and the safetensors header); never executes anything.

    Raises `DamagedWeightsError` for an empty file, or one that starts like safetensors (a length, then `{`)
    but whose header `safe_open` rejects or whose length is absurd (truncated or corrupt): such a file is
    never passed on to a pickle loader, nor called one.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(16)
    if not head:
        raise DamagedWeightsError(f"{path.name}: the file is empty (0 bytes); it holds no weights")
    if head.startswith(_GGUF_MAGIC):
        return WeightFormat.GGUF
    if _looks_like_safetensors(head):
        try:
            try:
                with safe_open(str(path), framework="pt") as opened:
                    opened.keys()
            except RuntimeError as exc:  # torch cannot map a file larger than RAM + swap: read the header
                if "mmap" not in str(exc):
                    raise
                from memory.weights import read_header

                read_header(path)
        except (SafetensorError, OSError, ValueError) as exc:
            raise DamagedWeightsError(
                f"{path.name}: looks like a safetensors file but cannot be read ({exc}); "
                "the file is damaged or incomplete (was the download finished?)"
            ) from exc
        return WeightFormat.SAFETENSORS
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] > _MAX_HEADER:
        # A safetensors start whose length is absurd (a flipped byte, a bad write): damaged, not a pickle.
        (length,) = struct.unpack("<Q", head[:8])
        size = path.stat().st_size
        if length + 8 > size:
            raise DamagedWeightsError(
                f"{path.name}: a damaged safetensors file: its header length ({length:,} bytes) is larger than "
                f"the file ({size:,} bytes); was the download finished?"
            )
        raise DamagedWeightsError(
            f"{path.name}: a damaged safetensors file: its header length ({length:,} bytes) is more than "
            f"safetensors allows ({_MAX_HEADER:,})"
        )
    if head.startswith(_ZIP_MAGIC):
        return WeightFormat.TORCH_ZIP
    if head[0] == 0x80 and 2 <= head[1] <= 5:  # the PROTO opcode that starts every protocol 2+ pickle
        return WeightFormat.PICKLE
    return WeightFormat.UNKNOWN


def check_weights_format(path: Path, *, allow_pickle: bool) -> WeightFormat:
    """The file's real format; raises `UnsafeFormatError` for anything but safetensors/GGUF without opt-in."""
    path = Path(path)
    fmt = sniff_weight_format(path)
    if fmt.is_safe or allow_pickle:
        return fmt
    what = {
        WeightFormat.TORCH_ZIP: "a PyTorch pickle checkpoint (a zip archive)",
        WeightFormat.PICKLE: "a Python pickle",
        WeightFormat.UNKNOWN: "neither safetensors nor GGUF (unknown content, treated as a pickle)",
    }[fmt]
    raise UnsafeFormatError(
        f"{path.name}: this file is {what}, whatever its name says; pickles can run code when loaded. "
        + PICKLE_HELP
    )


def load_pickle_state_dict(path: Path, *, allow_pickle: bool) -> dict[str, Any]:
    """A pickle checkpoint's tensors: `weights_only=True` first; full unpickling only with opt-in.

    Lightning-style checkpoints nest the weights under "state_dict"; some carry extra objects that only
    full unpickling can rebuild, which is what the user's opt-in allows (with a warning).
    """
    import pickle

    import torch

    check_weights_format(path, allow_pickle=allow_pickle)

    def load(weights_only: bool) -> Any:
        # An open file, never the name: torch.load hands any name ending in `.safetensors` to safetensors,
        # and this file is a pickle whatever it is called.
        with Path(path).open("rb") as f:
            return torch.load(f, map_location="cpu", weights_only=weights_only)

    try:
        data = load(weights_only=True)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:  # unreachable after the check above; kept so the gate cannot be bypassed
            raise UnsafeFormatError(f"{path.name}: {exc}") from exc
        warnings.warn(
            f"{path.name}: not loadable with weights_only=True ({str(exc).splitlines()[0]}); "
            "unpickling it in full because pickles are allowed",
            stacklevel=2,
        )
        data = load(weights_only=False)
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: the pickle holds a {type(data).__name__}, not a dict of tensors")
    return data


def open_gguf_reader(path: Path, on_array: Callable[[str, int, int], None] | None = None) -> Any:
    """`gguf.GGUFReader` for `path`; a truncated or corrupt file raises `DamagedWeightsError` saying so.

    The one way Nodeloom opens a GGUF file (LLMs and diffusion models alike): the header's declared sizes
    are checked against the file's size first (`gguf_header_problem`), so a count of 2^60 is refused at once.

    gguf-py itself fails on a cut download with a numpy reshape error. The tensor table sits at the start
    of the file, so the size the file should have is known before any tensor is mapped: compare them.
    """
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    path = Path(path)

    class _CheckedReader(GGUFReader):
        # Parsing the metadata is most of a first GGUF conversion (~5 s for a 49k-token vocabulary, one
        # numpy view per item): `on_array(key, items read, items)` follows the big arrays item by item.
        _key, _items, _done = "", 0, -1

        # GGUFReader maps the file as an `np.memmap` and slices it once per metadata item; every memmap slice
        # runs numpy's Python-level `memmap.__getitem__`/`__array_finalize__`, two thirds of parsing a 49k
        # vocabulary (SmolLM2: 13-15 s against 4-5 s on 2 busy cores). A plain ndarray view of the same map
        # reads the same bytes (tensors stay views into the mapped file) without that overhead.
        @property
        def data(self) -> Any:
            return self._mapped

        @data.setter
        def data(self, value: Any) -> None:
            self._mapped = value.view(np.ndarray) if isinstance(value, np.memmap) else value

        def _get_str(self, offset: int) -> Any:
            parts = super()._get_str(offset)
            if on_array is not None and self._done < 0:  # outside an array: a key (or a string value)
                self._key = bytes(parts[1]).decode("utf-8", "replace")
            return parts

        def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
            if on_array is None:
                return super()._get_field_parts(orig_offs, raw_type)
            if self._done >= 0:
                self._done += 1
                if self._done % 4096 == 0:
                    on_array(self._key, self._done, self._items)
                return super()._get_field_parts(orig_offs, raw_type)
            if raw_type != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            self._items, self._done = int(self._get(orig_offs + 4, np.uint64)[0]), 0
            try:
                return super()._get_field_parts(orig_offs, raw_type)
            finally:
                self._done = -1
                on_array(self._key, self._items, self._items)

        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

            end = start_offs
            for field in fields:
                _, _, _, dims, raw_dtype, offset = field.parts
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(int(raw_dtype[0]))]
                count = 1
                for d in dims.tolist():
                    count *= int(d)
                end = max(end, int(start_offs + offset[0]) + count * size // block)
            if end > len(self.data):
                missing = end - len(self.data)
                raise DamagedWeightsError(
                    f"{path.name}: the file is damaged or incomplete: its tensors need {end:,} bytes but the "
                    f"file has {len(self.data):,} ({missing:,} bytes missing; was the download finished?)"
                )
            super()._build_tensors(start_offs, fields)

    problem = gguf_header_problem(path)
    if problem is not None:  # before GGUFReader, which would believe a count of 2^60 and loop on it
        raise DamagedWeightsError(f"{path.name}: not a readable GGUF file (damaged or incomplete): {problem}")
    try:
        return _CheckedReader(str(path), "r")
    except DamagedWeightsError:
        raise
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as exc:
        raise DamagedWeightsError(
            f"{path.name}: not a readable GGUF file (damaged or incomplete: {str(exc)[:200]})"
        ) from None
