"""A GGUF LLM before anything parses it: the form `keep_quantized` picks, where its packed copy lives, and the
working memory a first repack will hold, from the file's header alone.

Lives here: `quantized_mode`, `packed_is_faster`, `PACK_VERSION`, `WEIGHTS_FILE`, `META_FILE`, `machine_tag`,
`packed_cache_root`, `packed_cache_dir`, `is_packed`, `repack_what`, `repack_bytes`, `parse_bytes`,
`first_repack_bytes`, `first_repack_reserved`, `ARCHITECTURES`. Imports the standard library, torch,
`memory`, `pipelines.gguf_header`, `pipelines.llm.gguf_cache` (the file's key; it imports its converter's
modules only when converting) and `pipelines.llm.packed_linear` (inside `packed_is_faster`, to measure the
kernels once per machine). No transformers and no gguf-py parse.

Why apart from `packed_cache` and `runtime`: `LoadLLM` reserves a first repack's working memory here
(`first_repack_reserved`), before it imports the LLM runtime (transformers, ~1 s) and before gguf-py parses
the vocabulary (~1.8 s for SmolLM2's 49k tokens). A plan's manager stops a loader at its reservation, so a
plan answers without either; the run goes on, and its repack reserves the figure it measures during the parse
in place of this one (`packed_cache._write_packed`, under the same name).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from memory.paths import user_data_dir
from pipelines.gguf_header import STRING_TYPE, GGUFHeader, read_gguf_header
from pipelines.llm.gguf_cache import gguf_cache_key

if TYPE_CHECKING:
    from memory import MemoryManager

# Bump when the packed names or numbers change; old folders are then ignored.
PACK_VERSION = 2  # 2: data aligned to 64 bytes
WEIGHTS_FILE = "packed.safetensors"
META_FILE = "nodeloom-packed.json"

# The architectures `pipelines.llm.gguf_loader` turns into a model (its `_ARCHITECTURES`; a test keeps the two
# equal) and the tokenizers it builds: a file it refuses is refused by its parse, before any reservation.
ARCHITECTURES = ("gemma3", "llama", "mistral", "qwen2", "qwen3")
TOKENIZERS = ("gpt2", "llama")

# What gguf-py's reader and the tokenizer built from it add to the process (`parse_bytes`). Measured here on
# SmolLM2-135M's Q4_1 file (49,152 tokens and token types, 48,900 merges), RSS before and after each step in a
# fresh process that had imported the LLM runtime, twice (the same to 0.2 MiB): `read_gguf` +72.2 MiB for
# the reader's 245,266 numpy views (one per scalar item, a length and a bytes view per string: gguf-py
# slices every item), 309 bytes a view; the token list, config and tokenizer +56.3 MiB for 98,052 tokens and
# merges, 602 bytes each (their Python strings and the Rust tokenizer's vocabulary and merge tables). Checked
# on copies of its metadata with a half, twice and three times its vocabulary (a prefix; added token pairs
# and merges): measured 67.4 / 213.4 / 315 MiB, estimated 64.1 / 228.8 / 329.1 MiB (0.95-1.07).
_READER_BYTES_PER_VIEW = 309
_TOKENIZER_BYTES_PER_ITEM = 602
_TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")


def quantized_mode(device: torch.device, keep_quantized: bool | str) -> str:
    """ "packed", "blocks" (GGUF blocks dequantized per layer) or "float" (the float32 copy).

    The rule for "auto", from measurements (benchmarks/llm_vs_llamacpp.py): on a CPU, packed when
    `packed_kernels_work` measures torch's int4 matmul faster than a float32 one at batch 1 on this machine
    (it is ~3x here: decoding reads ~85 MB a token instead of 540 MB), else the float32 copy (dequantizing
    per layer was 16x slower than it); on an accelerator, the blocks (the packed kernels are CPU ones)."""
    if keep_quantized in (False, "off"):
        return "float"
    if keep_quantized not in (True, "on", "auto", "packed", "blocks"):
        raise ValueError(f"keep_quantized must be 'auto', 'on' or 'off', not {keep_quantized!r}")
    if keep_quantized == "blocks" or device.type != "cpu":
        return "blocks"
    if keep_quantized in (True, "on", "packed"):
        return "packed"
    return "packed" if packed_is_faster() else "float"


def machine_tag() -> str:
    """What the packed layout depends on besides the file: torch's version and its CPU kernels."""
    capability = torch.backends.cpu.get_cpu_capability()
    return hashlib.sha256(f"{PACK_VERSION}:{torch.__version__}:{capability}".encode()).hexdigest()[:8]


def packed_cache_root() -> Path:
    return user_data_dir() / "gguf-packed"


def packed_cache_dir(path: Path, root: Path | None = None) -> Path:
    return (root or packed_cache_root()) / f"{gguf_cache_key(Path(path))}-{machine_tag()}"


def is_packed(folder: Path) -> bool:
    return (folder / META_FILE).is_file() and (folder / WEIGHTS_FILE).is_file()


def packed_is_faster(root: Path | None = None) -> bool:
    """`packed_kernels_work` measured once per machine (torch version + CPU capability) and remembered."""
    root = root or packed_cache_root()
    record = root / f"probe-{machine_tag()}.json"
    try:
        return bool(json.loads(record.read_text())["packed_faster"])
    except (OSError, ValueError, KeyError):
        pass
    from pipelines.llm.packed_linear import packed_kernels_work

    faster, packed_s, float_s = packed_kernels_work()
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".probe-", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump({"packed_faster": faster, "packed_s": packed_s, "float32_s": float_s}, f)
    os.replace(tmp, record)  # atomic: a reader sees the old record or the whole new one
    return faster


def repack_what(path: Path) -> str:
    """The name a repack's working memory is reserved under (the early figure and the measured one alike)."""
    return f"repacking {Path(path).name}"


def repack_bytes(parsed_bytes: int, tensor_bytes: int, largest_float32_bytes: int) -> int:
    """What a repack holds at its peak beside what was resident before it started: `parsed_bytes` (the
    reader's metadata and the tokenizer built from it), the mapped tensor data (every page is faulted in), the
    packed tensors (about the file's tensor bytes: 91 vs 92 MiB for SmolLM2's Q4_1 file, int4 groups costing
    what Q4_1 blocks do) and the largest tensor dequantized to float32 twice (the rows being packed and their
    quantized copy beside them). Measured on SmolLM2-135M Q4_1: 588 MiB above the start, this figure 600 MiB."""
    return parsed_bytes + 2 * tensor_bytes + 2 * largest_float32_bytes


def parse_bytes(header: GGUFHeader) -> int:
    """What parsing the file's metadata and building its tokenizer will add, from the header's array lengths
    (the measured model above: per reader view, per token and merge)."""
    views = sum(2 + items * (2 if itype == STRING_TYPE else 1) for itype, items in header.arrays.values())
    tokenizer_items = sum(header.arrays.get(key, (0, 0))[1] for key in _TOKENIZER_ARRAYS)
    return views * _READER_BYTES_PER_VIEW + tokenizer_items * _TOKENIZER_BYTES_PER_ITEM


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def first_repack_bytes(path: Path, device: torch.device, keep_quantized: bool | str) -> int | None:
    """The working memory a first repack of `path` will hold (`repack_bytes`, its parse estimated from the
    header), or None when no repack is due: not a GGUF file, not packed on this device, packed already, or a
    file its parse will refuse (damaged, an architecture or tokenizer the loader lacks: the parse says so)."""
    path = Path(path)
    if not path.is_file() or not _is_gguf(path):
        return None
    if quantized_mode(device, keep_quantized) != "packed" or is_packed(packed_cache_dir(path)):
        return None
    try:
        header = read_gguf_header(path)
        sizes = [(t.n_elements, t.n_bytes(), header.data_offset + t.offset) for t in header.tensors]
    except (ValueError, KeyError):  # a damaged header, an unknown tensor type
        return None
    if header.metadata.get("general.architecture") not in ARCHITECTURES:
        return None
    if header.metadata.get("tokenizer.ggml.model") not in TOKENIZERS:
        return None
    if any(offset + nbytes > header.file_size for _, nbytes, offset in sizes):  # cut short
        return None
    largest = max((elements for elements, _, _ in sizes), default=0) * 4
    return repack_bytes(parse_bytes(header), sum(nbytes for _, nbytes, _ in sizes), largest)


@contextmanager
def first_repack_reserved(memory: MemoryManager, path: Path, keep_quantized: bool | str) -> Iterator[None]:
    """Reserve a first repack's working memory from the header for the block (nothing when none is due).

    The repack inside reserves its measured figure under the same name, replacing this one, and releases it;
    this releases whatever is left when the block ends (a parse that refused the file)."""
    nbytes = first_repack_bytes(path, memory.device, keep_quantized)
    if nbytes is None:
        yield
        return
    what = repack_what(path)
    memory.reserve_working(nbytes, what)
    try:
        yield
    finally:
        memory.release_working(what)
