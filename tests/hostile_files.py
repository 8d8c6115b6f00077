"""Builders of hostile ComfyUI and PNG files, all small on disk: subgraphs that contain themselves or fan
out, a shared huge value copied by every instance, and PNG bombs (a zTXt chunk that inflates past the
limit, a declared size of 10^10 pixels, a chunk claiming hundreds of MB, a deep or ambiguous prompt).

Lives here: `png_chunk`, `png_bytes`, `text_chunk`, `ztxt_bomb`, `self_containing_ui`, `wide_subgraphs_ui`,
`shared_value_ui`, `deep_json`. Imports the standard library only; used by tests/test_bad_input_import.py
and tests/fuzz_mutations.py.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from typing import Any

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOOP_ID = "5f0c0000-0000-4000-8000-000000001000"  # UUID-shaped, as ComfyUI names subgraphs


def png_chunk(kind: bytes, data: bytes, *, length: int | None = None) -> bytes:
    """One PNG chunk with a correct CRC; `length` overrides the declared length (a lying header)."""
    declared = len(data) if length is None else length
    return struct.pack(">I", declared) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(chunks: list[bytes], width: int = 2, height: int = 2) -> bytes:
    """A PNG with `chunks` between its header and its (black, RGB) image data. The image data is that
    of a 2x2 picture whatever the declared size: readers of the text chunks stop before it."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    pixels = zlib.compress(b"".join(b"\0" + b"\0" * 3 * min(width, 2) for _ in range(min(height, 2))))
    return PNG_MAGIC + ihdr + b"".join(chunks) + png_chunk(b"IDAT", pixels) + png_chunk(b"IEND", b"")


def text_chunk(key: str, text: str, kind: bytes = b"tEXt") -> bytes:
    """A text chunk as ComfyUI (tEXt), a compressing writer (zTXt) or Nodeloom (iTXt) writes it."""
    if kind == b"tEXt":
        return png_chunk(kind, key.encode("latin-1") + b"\0" + text.encode("latin-1"))
    if kind == b"zTXt":
        return png_chunk(kind, key.encode("latin-1") + b"\0\0" + zlib.compress(text.encode("latin-1")))
    return png_chunk(b"iTXt", key.encode("latin-1") + b"\0\0\0\0\0" + text.encode("utf-8"))


@lru_cache(maxsize=4)
def ztxt_bomb(key: str, inflated: int) -> bytes:
    """A zTXt chunk of a few tens of KB that inflates to `inflated` bytes of spaces."""
    return png_chunk(b"zTXt", key.encode("latin-1") + b"\0\0" + zlib.compress(b" " * inflated, 9))


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _node(node_id: int, type_: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": type_,
        "mode": 0,
        "inputs": [],
        "outputs": [],
        "widgets_values": [],
        **extra,
    }


def _leaf(node_id: int) -> dict[str, Any]:
    return _node(node_id, "EmptyLatentImage", widgets_values=[512, 512, 1])


def _subgraph(sid: str, name: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": sid, "name": name, "inputs": [], "outputs": [], "nodes": nodes, "links": []}


def _ui(top: list[dict[str, Any]], subgraphs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": 0.4, "nodes": top, "links": [], "definitions": {"subgraphs": subgraphs}}


def self_containing_ui(copies: int = 4, through: bool = False) -> dict[str, Any]:
    """A UI workflow whose subgraph 'Loop' holds `copies` instances of itself (with `through`, of a
    subgraph 'Inner' that holds 'Loop' again). Expanded 16 levels deep that is copies^16 nodes."""
    inner_id = LOOP_ID.replace("1000", "1001")
    target = inner_id if through else LOOP_ID
    loop = _subgraph(LOOP_ID, "Loop", [*(_node(i + 1, target) for i in range(copies)), _leaf(99)])
    subgraphs = [loop, _subgraph(inner_id, "Inner", [_node(1, LOOP_ID), _leaf(2)])] if through else [loop]
    return _ui([_node(1, LOOP_ID)], subgraphs)


def wide_subgraphs_ui(levels: int = 6, width: int = 10) -> dict[str, Any]:
    """No subgraph contains itself, but each level holds `width` instances of the next: width^levels
    nodes from a few KB."""
    subgraphs = []
    for level in range(levels):
        if level < levels - 1:
            nodes = [_node(i + 1, f"level-{level + 1}") for i in range(width)]
        else:
            nodes = [_leaf(i + 1) for i in range(width)]
        subgraphs.append(_subgraph(f"level-{level}", f"Level {level}", nodes))
    return _ui([_node(1, "level-0")], subgraphs)


def shared_value_ui(chars: int, instances: int) -> dict[str, Any]:
    """One subgraph whose node has a `chars`-long title, placed `instances` times: the file holds the
    title once, the expanded workflow `instances` times."""
    sub = _subgraph(
        "big", "Big", [_node(1, "EmptyLatentImage", title="t" * chars, widgets_values=[512, 512, 1])]
    )
    return _ui([_node(i + 1, "big") for i in range(instances)], [sub])
