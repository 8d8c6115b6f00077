"""Reading a PNG's text chunks (tEXt, zTXt, iTXt) without decoding the picture, with explicit limits.

Lives here: `read_png_texts`, `PngTextError`, `is_png`, `PNG_MAGIC`, `NODELOOM_KEY`, `MAX_CHUNKS`. Imports
the standard library, and PIL lazily (its pixel limit: what Load Image would refuse is refused here too).
No torch: `app import` stays light.

A PNG from anywhere can declare any size, compress gigabytes into a few kilobytes, repeat a key, or carry
a text chunk of hundreds of MB. Each becomes one sentence, and nothing is read or decompressed past the
limits: only the chunks whose key is asked for are read, each text is at most the caller's `max_chars`
(a workflow file's limit) and all of them together at most twice that (ComfyUI stores its graph twice).
Like PIL's `Image.open`, only the chunks before the image data are read (where PIL and ComfyUI put them).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Collection
from typing import BinaryIO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NODELOOM_KEY = "nodeloom.workflow"  # the key of the workflow Nodeloom embeds in the PNGs it saves
MAX_CHUNKS = 10_000  # chunks before the image data; a real PNG has a handful
_TEXT_KINDS = (b"tEXt", b"zTXt", b"iTXt")
_KEY_BYTES = 80  # a PNG keyword is 1-79 bytes, then a NUL


class PngTextError(ValueError):
    """A PNG that cannot be read, or whose text chunks are refused; the message says which (no file name)."""


def is_png(raw: bytes) -> bool:
    return raw.startswith(PNG_MAGIC)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _check_pixels(width: int, height: int) -> None:
    from PIL import Image

    if width == 0 or height == 0:
        raise PngTextError("damaged PNG: it declares a size of 0 pixels")
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > 2 * limit:  # where PIL raises DecompressionBombError
        raise PngTextError(
            f"the PNG declares {width:,} x {height:,} pixels, more than the {2 * limit:,} an image may have "
            "(a decompression bomb?); refused"
        )


def _inflate(data: bytes, key: str, budget: int) -> bytes:
    """zlib data, decompressed to at most `budget` bytes (the rest is never produced)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, budget + 1)
    except zlib.error as exc:
        raise PngTextError(f"damaged PNG: the {key!r} text chunk does not decompress ({exc})") from None
    if len(out) > budget or inflater.unconsumed_tail:
        raise PngTextError(
            f"the {key!r} text chunk decompresses to more than {_mib(budget)}; refused "
            "(a real workflow is far smaller)"
        )
    return out


def _decode(kind: bytes, key: str, body: bytes, budget: int) -> str:
    """The text of a chunk whose keyword (and its NUL) is already cut from `body`."""
    if kind == b"tEXt":
        return body.decode("latin-1")  # the PNG standard's encoding for tEXt and zTXt
    if kind == b"zTXt":
        if body[:1] != b"\0":
            raise PngTextError(f"damaged PNG: the {key!r} text chunk has an unknown compression method")
        return _inflate(body[1:], key, budget).decode("latin-1")
    # iTXt: compression flag, method, language NUL, translated keyword NUL, UTF-8 text
    parts = body[2:].split(b"\0", 2)
    if len(body) < 2 or len(parts) < 3:
        raise PngTextError(f"damaged PNG: the {key!r} text chunk is cut short")
    raw = parts[2]
    if body[0] == 1:
        if body[1] != 0:
            raise PngTextError(f"damaged PNG: the {key!r} text chunk has an unknown compression method")
        raw = _inflate(raw, key, budget)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PngTextError(
            f"the {key!r} text chunk is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) < n:
        raise PngTextError("damaged PNG: the file ends before its image data")
    return data


def read_png_texts(f: BinaryIO, keys: Collection[str], max_chars: int) -> dict[str, str]:
    """The texts of the chunks keyed one of `keys`, from a PNG file open for reading at its start.

    Raises `PngTextError`: not a PNG, damaged, a declared size past PIL's decompression-bomb limit, a key
    given twice, or texts past `max_chars` each / twice that together. Other chunks are skipped
    unread (seeked over), so their size costs nothing."""
    if f.read(len(PNG_MAGIC)) != PNG_MAGIC:
        raise PngTextError("not a PNG image (or a damaged one)")
    wanted = {key.encode("latin-1") for key in keys}
    found: dict[str, str] = {}
    total, max_total = 0, 2 * max_chars
    for index in range(MAX_CHUNKS):
        length, kind = struct.unpack(">I4s", _read_exact(f, 8))
        if index == 0:
            if kind != b"IHDR" or length != 13:
                raise PngTextError("not a PNG image (or a damaged one)")
            width, height = struct.unpack(">II", _read_exact(f, 17)[:8])
            _check_pixels(width, height)
            continue
        if kind in (b"IDAT", b"IEND"):
            return found
        if kind not in _TEXT_KINDS:
            f.seek(length + 4, 1)  # the chunk and its CRC, unread
            continue
        head = f.read(min(length, _KEY_BYTES))  # the keyword decides; a short read is judged below
        keyword, nul, _ = head.partition(b"\0")
        if not nul and len(head) < min(length, _KEY_BYTES):
            raise PngTextError("damaged PNG: the file ends before its image data")
        if not nul or keyword not in wanted:
            f.seek(length - len(head) + 4, 1)
            continue
        key = keyword.decode("latin-1")
        if key in found:
            raise PngTextError(
                f"the PNG has two {key!r} text chunks; which one is the workflow is ambiguous (remove one)"
            )
        budget = min(max_chars, max_total - total)
        if length > budget + _KEY_BYTES + 2:  # checked before reading: a 1 GB chunk is never loaded
            raise PngTextError(f"the {key!r} text chunk is {_mib(length)}; at most {_mib(budget)} is read")
        data = head + _read_exact(f, length - len(head))
        (crc,) = struct.unpack(">I", _read_exact(f, 4))
        if zlib.crc32(kind + data) != crc:
            raise PngTextError(f"damaged PNG: the {key!r} text chunk fails its checksum")
        found[key] = _decode(kind, key, data[len(keyword) + 1 :], budget)
        total += len(found[key])
        if total > max_total:
            raise PngTextError(f"the PNG's texts add up to more than {_mib(max_total)}; refused")
    raise PngTextError(f"damaged PNG: more than {MAX_CHUNKS:,} chunks before its image data")
