"""GGUF files whose header declares more than the file holds: refused at once with a message naming the file.

Covers the shared opener (`open_gguf_reader`) that the LLM loader and the diffusion GGUF reader both use:
array, string, key, tensor and dimension counts past the end of the file, a file cut short, and the same
files through `LoadDenoiser` on the command line (exit 1, one message, no numpy error).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from app.main import main
from pipelines.gguf_header import gguf_header_problem
from pipelines.llm.gguf_loader import read_gguf
from pipelines.quant.gguf_files import gguf_block_bytes, gguf_shapes, gguf_tensors
from pipelines.weight_format import DamagedWeightsError, open_gguf_reader

HUGE = 2**60
UINT8, UINT32, STRING, ARRAY = 0, 4, 8, 9


def _header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


# Each file is a few dozen bytes whose header claims something enormous.
HOSTILE: dict[str, bytes] = {
    # The file: 49 bytes, one array of 2^60 uint8 items.
    "array_items": _header(0, 1) + _key("a") + struct.pack("<IIQ", ARRAY, UINT8, HUGE),
    "string_array_items": _header(0, 1)
    + _key("tokenizer.ggml.tokens")
    + struct.pack("<IIQ", ARRAY, STRING, HUGE),
    "nested_array_items": _header(0, 1)
    + _key("a")
    + struct.pack("<IIQ", ARRAY, ARRAY, 2)
    + struct.pack("<IQ", UINT32, HUGE),
    "string_length": _header(0, 1) + _key("general.name") + struct.pack("<IQ", STRING, HUGE),
    "key_length": _header(0, 1) + struct.pack("<Q", HUGE) + b"abc" + b"\0" * 32,
    "key_count": _header(0, HUGE),
    "tensor_count": _header(HUGE, 0),
    "tensor_dims": _header(1, 0) + _key("w") + struct.pack("<I", 2**32 - 1) + b"\0" * 64,
    "unknown_type": _header(0, 1) + _key("a") + struct.pack("<I", 77) + b"\0" * 8,
    "cut_in_metadata": _header(0, 2) + _key("a") + struct.pack("<II", UINT32, 7),
}
EXPECTED = {
    "array_items": "1,152,921,504,606,846,976 items: 1,152,921,504,606,846,976 bytes needed at offset 49, only 0",
    "string_array_items": "'tokenizer.ggml.tokens'",
    "nested_array_items": "items",
    "string_length": "1,152,921,504,606,846,976 bytes",
    "key_length": "a metadata key",
    "key_count": "metadata keys",
    "tensor_count": "tensor entries",
    "tensor_dims": "dimensions",
    "unknown_type": "unknown value type 77",
    "cut_in_metadata": "2 metadata keys: 26 bytes needed",
}


def _valid_gguf(path: Path, tokens: int = 1000) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch="flux")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(tokens)])
    writer.add_array("scores", [0.5] * tokens)
    writer.add_tensor("double_blocks.0.img_attn.qkv.weight", np.ones((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_header_declaring_more_than_the_file_is_refused_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(HOSTILE[name])
    started = time.monotonic()
    with pytest.raises(DamagedWeightsError) as caught:
        open_gguf_reader(path)
    assert time.monotonic() - started < 2  # the unchecked reader loops for minutes, growing by ~12 MB/s
    message = str(caught.value)
    assert message.startswith(f"{path.name}: not a readable GGUF file")
    assert EXPECTED[name] in message and len(message) < 400


def test_the_llm_loader_refuses_the_49_byte_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(HOSTILE["array_items"])
    assert len(HOSTILE["array_items"]) == 49
    with pytest.raises(DamagedWeightsError, match="tiny.gguf"):
        read_gguf(path)


def test_a_valid_file_passes_the_header_check_and_reads_as_before(tmp_path: Path) -> None:
    path = _valid_gguf(tmp_path / "ok.gguf")
    assert gguf_header_problem(path) is None
    assert gguf_shapes(path) == {"double_blocks.0.img_attn.qkv.weight": (64, 32)}
    assert gguf_block_bytes(path) == {"double_blocks.0.img_attn.qkv.weight": 64 * 32 * 4}
    assert set(gguf_tensors(path)) == {"double_blocks.0.img_attn.qkv.weight"}


@pytest.mark.parametrize("reader", [gguf_shapes, gguf_block_bytes, gguf_tensors])
def test_every_diffusion_gguf_read_path_says_a_cut_file_is_damaged(tmp_path: Path, reader) -> None:
    data = _valid_gguf(tmp_path / "full.gguf").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:-4000])  # inside the tensor data: the header is whole
    with pytest.raises(DamagedWeightsError, match=r"cut\.gguf: .*4,000 bytes missing"):
        reader(path)


def test_load_denoiser_with_a_damaged_gguf_exits_1_with_one_clear_message(tmp_path: Path, capsys) -> None:
    data = _valid_gguf(tmp_path / "full.gguf").read_bytes()
    (tmp_path / "unet.gguf").write_bytes(data[:-4000])
    wf = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "unet": {"type": "LoadDenoiser", "params": {"path": str(tmp_path / "unet.gguf")}, "inputs": {}}
        },
    }
    (tmp_path / "wf.json").write_text(json.dumps(wf))
    code = main(["--run", str(tmp_path / "wf.json"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    assert "unet.gguf" in err and "damaged or incomplete" in err
    assert "reshape" not in err and "Traceback" not in err
