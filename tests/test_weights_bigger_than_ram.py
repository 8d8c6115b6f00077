"""A safetensors file larger than RAM + swap: torch's `safe_open` backend maps a file privately and writable,
which the kernel refuses (ENOMEM) past that size, so headers are parsed by hand and tensors read with
`pread` when the mapping is refused. The file here is sparse: twice the machine's RAM on paper, a few KiB on
disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from memory.weights import _PreadFile, header_entries, read_tensors
from pipelines.weight_format import WeightFormat, sniff_weight_format


def _sparse_file(path: Path, huge: int) -> torch.Tensor:
    """A file whose header lists a small tensor "w" and a `huge`-element bfloat16 "big" (never written)."""
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    header = {
        "w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
        "big": {"dtype": "BF16", "shape": [huge], "data_offsets": [48, 48 + 2 * huge]},
    }
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob + w.numpy().tobytes())
        f.truncate(8 + len(blob) + 48 + 2 * huge)  # sparse: no blocks behind "big"
    return w


def test_a_file_bigger_than_ram_is_read_without_mapping_it_whole(tmp_path: Path) -> None:
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    path = tmp_path / "huge.safetensors"
    w = _sparse_file(path, huge=ram)  # 2 bytes each: twice the RAM
    assert sniff_weight_format(path) == WeightFormat.SAFETENSORS
    entries = {key: (tag, shape) for _, key, tag, shape in header_entries([path])}
    assert entries == {"big": ("BF16", (ram,)), "w": ("F32", (3, 4))}
    [(name, t)] = list(read_tensors([("w", path, "w")], torch.float32))
    assert name == "w" and torch.equal(t, w)


def test_pread_reader_gives_the_files_tensors(tmp_path: Path) -> None:
    tensors = {"a": torch.randn(5, 7).to(torch.bfloat16), "b": torch.arange(4), "c": torch.empty(0, 3)}
    path = tmp_path / "t.safetensors"
    save_file(tensors, str(path))
    reader = _PreadFile(path)
    try:
        expected = load_file(str(path))
        for key, value in expected.items():
            got = reader.get_tensor(key)
            assert got.dtype == value.dtype and torch.equal(got, value)
    finally:
        reader.__exit__(None, None, None)
