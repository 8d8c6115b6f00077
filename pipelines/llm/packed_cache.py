"""Repack a GGUF LLM once per file and machine, keep it on disk, and load it memory-mapped.

Lives here: `ensure_packed`, `load_packed_model`, `packed_weight_bytes`, `repack_working_bytes`. Imports
`pipelines.llm.{gguf_plan,gguf_loader,packed_model,compact_model}`, safetensors and transformers (config,
tokenizer files). Where a file's folder is (`packed_cache_dir`, `machine_tag`, `PACK_VERSION`) lives in
`pipelines.llm.gguf_plan`, which a plan reads without importing this module's dependencies.

Layout, one folder per source file and machine (a folder `load_config`/`load_tokenizer` read as they read a
converted one):

    <user_data_dir>/gguf-packed/<gguf_cache_key>-<machine_tag>/
        config.json, generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja
        packed.safetensors     the packed tensors (`pipelines.llm.packed_model` names)
        nodeloom-packed.json   source, size, mtime, machine, seconds

The file part of the key changes whenever the file is replaced (size, mtime and samples of its bytes,
`gguf_cache_key`); the machine part hashes torch's version and CPU capability, because the int4 layout
is whatever this torch's `_convert_weight_to_int4pack_for_cpu` writes. No float32 copy is ever made: a
first repack reads the GGUF once (its metadata parse is the slow part, ~2 s here), later loads only
memory-map `packed.safetensors` and read the tokenizer's JSON. A folder is written under a temporary name
and renamed into place, so an interrupted repack leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from pipelines.llm.compact_model import CompactConfig, CompactLM
from pipelines.llm.gguf_loader import (
    GGUFContents,
    end_of_turn_ids,
    gguf_config,
    gguf_tokenizer,
    gguf_tokens,
    mapped_bytes,
    read_gguf,
)
from pipelines.llm.gguf_plan import (
    META_FILE,
    PACK_VERSION,
    WEIGHTS_FILE,
    is_packed,
    packed_cache_dir,
    repack_bytes,
)
from pipelines.llm.packed_model import compact_from_packed, pack_gguf_tensors
from pipelines.load_progress import OnProgress

_ALIGN = 64  # bytes: what the kernels' aligned vector loads need of a weight's start
# safetensors stores tensors sorted by name; "~" sorts after every name here
_TAIL, _TAIL_BYTES = "~tail", 4096


def _rss() -> int:
    """This process's resident bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def repack_working_bytes(contents: GGUFContents, parsed_bytes: int) -> int:
    """`gguf_plan.repack_bytes` of the parsed file: `parsed_bytes` measured as the reader and tokenizer were
    made, the mapped tensor bytes and the largest tensor's float32 bytes from the reader's table."""
    largest = max((int(np.prod(t.shape)) for t in contents.reader.tensors), default=0) * 4
    return repack_bytes(parsed_bytes, mapped_bytes(contents), largest)


def _write_packed(
    path: Path, dest: Path, on_progress: OnProgress | None, on_plan: Callable[[int], None] | None = None
) -> None:
    from transformers import GenerationConfig

    started = time.perf_counter()
    before = _rss()
    if on_progress is not None:
        on_progress("GGUF: reading metadata (1/3)", 0, 1)
    contents = read_gguf(path)
    tokens = gguf_tokens(contents)
    config = gguf_config(contents, tokens)
    if on_progress is not None:
        on_progress("GGUF: building the tokenizer (2/3)", 0, 1)
    tokenizer = gguf_tokenizer(contents, tokens)
    if on_plan is not None:  # budgeted before the tensors are touched (a plan stops here and counts it)
        on_plan(repack_working_bytes(contents, max(0, _rss() - before)))
    if on_progress is not None:
        on_progress("GGUF: repacking the weights (3/3)", 0, 1)
    state = pack_gguf_tensors(contents, CompactConfig.from_transformers(config))
    dest.mkdir(parents=True)
    # Insurance: should a kernel's vector loads read past the last tensor, a tail keeps them inside the mapping
    # (the segfault first blamed on that was the alignment, see `_save_aligned`).
    state[_TAIL] = torch.zeros(_TAIL_BYTES, dtype=torch.uint8)
    _save_aligned(state, dest / WEIGHTS_FILE)
    del state[_TAIL]
    config.save_pretrained(dest)
    eos = end_of_turn_ids(contents, tokens)
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos or None, pad_token_id=config.pad_token_id
    ).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    stat = path.stat()
    meta = {
        "source": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "pack_version": PACK_VERSION,
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bytes": sum(t.numel() * t.element_size() for t in state.values()),
        "seconds": round(time.perf_counter() - started, 3),
    }
    (dest / META_FILE).write_text(json.dumps(meta, indent=2))
    if on_progress is not None:
        on_progress("GGUF: repacking the weights (3/3)", 1, 1)


def _header_end(path: Path) -> int:
    with path.open("rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def _save_aligned(state: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors with its data starting on a 64-byte boundary (the header padded through the metadata).

    The int8 kernel reads its weight with aligned vector loads from 4 rows of activations up: a weight
    memory-mapped at an 8-byte boundary segfaulted. safetensors pads its header to 8 bytes, so adding a
    multiple of 8 characters to a metadata value moves the data start by exactly that much."""
    metadata = {"format": "nodeloom-packed", "pad": ""}
    save_file(state, str(path), metadata=metadata)
    short = -_header_end(path) % _ALIGN
    if short:
        save_file(state, str(path), metadata={**metadata, "pad": " " * short})
    assert _header_end(path) % _ALIGN == 0, "the packed file's data is not aligned"


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """The tensor itself when it starts on a 64-byte boundary, else an aligned copy (the kernels need it)."""
    return t if t.data_ptr() % _ALIGN == 0 else t.clone()


def ensure_packed(
    path: Path,
    *,
    root: Path | None = None,
    on_progress: OnProgress | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> Path:
    """The packed folder for `path`, repacking the file first when it is not there yet; `on_plan(bytes)`
    is told a repack's working memory (`repack_working_bytes`) before it reads the tensors."""
    path = Path(path)
    folder = packed_cache_dir(path, root)
    if is_packed(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():  # left incomplete by hand: repack
        shutil.rmtree(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        work = tmp / "model"
        _write_packed(path, work, on_progress, on_plan)
        try:
            os.replace(work, folder)
        except OSError:
            if not is_packed(folder):  # not another process finishing first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def packed_weight_bytes(folder: Path) -> int:
    """Bytes the loaded model holds: the packed tensors, as the safetensors header lists them."""
    return int(json.loads((folder / META_FILE).read_text())["bytes"])


def load_packed_model(folder: Path, config: object, on_progress: OnProgress | None = None) -> CompactLM:
    """The compact decoder over the memory-mapped packed tensors (no copy, no conversion)."""
    state: dict[str, torch.Tensor] = {}
    total = packed_weight_bytes(folder)
    done = 0
    with safe_open(str(folder / WEIGHTS_FILE), framework="pt") as f:
        for key in f.keys():
            if key == _TAIL:
                continue
            state[key] = _aligned(f.get_tensor(key))
            done += state[key].numel() * state[key].element_size()
            if on_progress is not None:
                on_progress("llm", min(done, total), total)
    return compact_from_packed(state, CompactConfig.from_transformers(config))
