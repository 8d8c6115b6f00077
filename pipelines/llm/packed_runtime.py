"""A GGUF LLM with packed weights, as the memory manager sees it.

Lives here: `open_packed_llm`. Imports `memory`, `pipelines.model_keys`,
`pipelines.llm.{gguf_plan,hf_loader,packed_cache}`; never nodes/, app/ or Qt. (The measured rule for `auto`,
`packed_is_faster`, lives in `pipelines.llm.gguf_plan`.)

The handle's weight bytes are the packed tensors' bytes (known from the cache's meta before anything
loads), so the KV-cache budget check counts what is really held; the manager's `build` memory-maps them.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PretrainedConfig

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.llm.gguf_plan import WEIGHTS_FILE, repack_what
from pipelines.llm.hf_loader import LLMFiles, load_config
from pipelines.llm.packed_cache import ensure_packed, load_packed_model, packed_weight_bytes
from pipelines.load_progress import OnProgress
from pipelines.model_keys import component_keys


def open_packed_llm(
    memory: MemoryManager, path: Path, on_convert: OnProgress | None = None
) -> tuple[LLMFiles, ModelHandle, PretrainedConfig]:
    """Repack `path` once (cached per file and machine) and register the packed model. A first repack's
    working memory is reserved for its duration, as a float32 conversion's is."""
    what = repack_what(path)
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
