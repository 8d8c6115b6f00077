"""A GGUF LLM with packed weights, as the memory manager sees it; and the measured rule for `auto`.

Lives here: `open_packed_llm`, `packed_is_faster`. Imports `memory`, `pipelines.model_keys`,
`pipelines.llm.{hf_loader,packed_cache,packed_linear}`; never nodes/, app/ or Qt.

The handle's weight bytes are the packed tensors' bytes (known from the cache's meta before anything
loads), so the KV-cache budget check counts what is really held; the manager's `build` memory-maps them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from transformers import PretrainedConfig

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.llm.hf_loader import LLMFiles, load_config
from pipelines.llm.packed_cache import (
    WEIGHTS_FILE,
    ensure_packed,
    load_packed_model,
    machine_tag,
    packed_cache_root,
    packed_weight_bytes,
)
from pipelines.llm.packed_linear import packed_kernels_work
from pipelines.load_progress import OnProgress
from pipelines.model_keys import component_keys


def open_packed_llm(
    memory: MemoryManager, path: Path, on_convert: OnProgress | None = None
) -> tuple[LLMFiles, ModelHandle, PretrainedConfig]:
    """Repack `path` once (cached per file and machine) and register the packed model. A first repack's
    working memory is reserved for its duration, as a float32 conversion's is."""
    what = f"repacking {Path(path).name}"
    reserved: list[int] = []

    def reserve(nbytes: int) -> None:
        memory.reserve_working(nbytes, what)
        reserved.append(nbytes)

    try:
        folder = ensure_packed(path, on_progress=on_convert, on_plan=reserve)
    finally:
        if reserved:
            memory.release_working(what)
    files = LLMFiles(path, folder, (folder / WEIGHTS_FILE,), from_gguf=True)
    config = load_config(files)
    handle = memory.register(
        ComponentSpec(
            **component_keys(Path(path).resolve(), "llm-packed", stamp=folder.name).spec_fields(),
            name="llm",
            kind="llm",
            build=lambda: load_packed_model(folder, config, memory.load_progress),
            storage="packed",
        )
    )
    if handle.weight_bytes is None:
        handle.weight_bytes = packed_weight_bytes(folder)
    return files, handle, config


def packed_is_faster(root: Path | None = None) -> bool:
    """`packed_kernels_work` measured once per machine (torch version + CPU capability) and remembered."""
    root = root or packed_cache_root()
    record = root / f"probe-{machine_tag()}.json"
    try:
        return bool(json.loads(record.read_text())["packed_faster"])
    except (OSError, ValueError, KeyError):
        pass
    faster, packed_s, float_s = packed_kernels_work()
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".probe-", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump({"packed_faster": faster, "packed_s": packed_s, "float32_s": float_s}, f)
    os.replace(tmp, record)  # atomic: a reader sees the old record or the whole new one
    return faster
