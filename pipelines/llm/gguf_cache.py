"""Convert a GGUF file once and keep the result: safetensors + config + tokenizer on disk.

Lives here: `gguf_cache_key`, `gguf_cache_dir`, `ensure_gguf_converted`, `CONVERTER_VERSION`.
Imports `memory` (for `user_data_dir`), safetensors; `pipelines.llm.gguf_loader` and transformers inside
`convert_gguf`, so the file's key (`gguf_cache_key`, which the packed cache shares) costs no transformers
import: `pipelines.llm.gguf_plan` reads it before a plan's first reservation.

Layout, one folder per source file (a transformers model folder, loadable by `from_pretrained`):

    <user_data_dir>/gguf-cache/<key>/
        config.json              transformers config built from the GGUF metadata
        generation_config.json   eos = the end-of-turn id(s)
        model.safetensors        every tensor dequantized to float32 (Q/K un-permuted)
        tokenizer.json, tokenizer_config.json, chat_template.jinja
        nodeloom-gguf.json       source path, size, mtime, key, tensor types, conversion seconds

The key is `v<CONVERTER_VERSION>-<sha256 of (size, mtime_ns, first/middle/last MiB)>[:20]`: cheap
for multi-GB files and changed whenever the file is replaced. A folder is written under a temporary
name and renamed into place, so a crash mid-conversion never leaves a half cache behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import save_file

from memory.paths import user_data_dir
from pipelines.load_progress import OnProgress

# Bump when the converted layout or numbers change; old cache folders are then ignored.
CONVERTER_VERSION = 1
_SAMPLE_BYTES = 1 << 20
_META_FILE = "nodeloom-gguf.json"


def gguf_cache_key(path: Path) -> str:
    """A short key for this exact file: size, mtime and three 1 MiB samples, hashed."""
    stat = path.stat()
    digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    with path.open("rb") as f:
        for offset in (
            0,
            max(0, stat.st_size // 2 - _SAMPLE_BYTES // 2),
            max(0, stat.st_size - _SAMPLE_BYTES),
        ):
            f.seek(offset)
            digest.update(f.read(_SAMPLE_BYTES))
    return f"v{CONVERTER_VERSION}-{digest.hexdigest()[:20]}"


def gguf_cache_root() -> Path:
    return user_data_dir() / "gguf-cache"


def gguf_cache_dir(path: Path) -> Path:
    return gguf_cache_root() / gguf_cache_key(path)


def is_converted(folder: Path) -> bool:
    return (folder / _META_FILE).is_file() and (folder / "model.safetensors").is_file()


# Called with the bytes the dequantized tensors will take, before any is made (to budget them).
OnPlan = Callable[[int], None]


# The stages a conversion reports, in order (each with its own done/total; parsing the metadata is the longest).
STAGES = ("reading {key}", "building the tokenizer", "dequantizing to float32", "writing safetensors")


def _stage(on_progress: OnProgress | None, index: int, done: int, total: int, key: str = "") -> None:
    if on_progress is not None:
        what = STAGES[index].format(key=key.removeprefix("tokenizer.ggml.") or "metadata")
        on_progress(f"GGUF: {what} ({index + 1}/{len(STAGES)})", done, total)


def convert_gguf(
    path: Path, dest: Path, on_plan: OnPlan | None = None, on_progress: OnProgress | None = None
) -> dict[str, object]:
    """Write the transformers folder for `path` into `dest` (which must not exist). Returns the meta.

    `on_progress(stage, done, total)` follows each of `STAGES`; it may raise to cancel."""
    from transformers import GenerationConfig

    from pipelines.llm.gguf_loader import (
        end_of_turn_ids,
        float32_bytes,
        gguf_config,
        gguf_state_dict,
        gguf_tokenizer,
        gguf_tokens,
        mapped_bytes,
        read_gguf,
        tensor_types,
    )

    started = time.perf_counter()
    _stage(on_progress, 0, 0, 1)
    contents = read_gguf(path, lambda key, done, total: _stage(on_progress, 0, done, total, key))
    if on_plan is not None:
        # The float32 copy and the mapped file pages it is made from (both resident until the reader goes).
        on_plan(float32_bytes(contents) + mapped_bytes(contents))
    tokens = gguf_tokens(contents)
    config = gguf_config(contents, tokens)
    _stage(on_progress, 1, 0, 1)
    tokenizer = gguf_tokenizer(contents, tokens)
    _stage(on_progress, 1, 1, 1)
    state = gguf_state_dict(contents, config, lambda done, total: _stage(on_progress, 2, done, total))
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)

    dest.mkdir(parents=True)
    _stage(on_progress, 3, 0, 1)
    save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(dest)
    eos = end_of_turn_ids(contents, tokens)
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos or None, pad_token_id=config.pad_token_id
    ).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    stat = path.stat()
    meta: dict[str, object] = {
        "source": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "converter_version": CONVERTER_VERSION,
        "architecture": contents.architecture,
        "name": contents.metadata.get("general.name"),
        "tensor_types": tensor_types(contents),
        "parameters": sum(t.numel() for t in state.values()),
        "seconds": round(time.perf_counter() - started, 3),
    }
    (dest / _META_FILE).write_text(json.dumps(meta, indent=2))
    _stage(on_progress, 3, 1, 1)
    return meta


def ensure_gguf_converted(
    path: Path,
    *,
    cache_root: Path | None = None,
    on_plan: OnPlan | None = None,
    on_progress: OnProgress | None = None,
) -> Path:
    """The cache folder for `path`, converting the file first when it is not there yet."""
    path = Path(path)
    root = cache_root or gguf_cache_root()
    folder = root / gguf_cache_key(path)
    if is_converted(folder):
        return folder
    root.mkdir(parents=True, exist_ok=True)
    if folder.exists():  # left incomplete by hand: convert again
        shutil.rmtree(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        work = tmp / "model"
        convert_gguf(path, work, on_plan, on_progress)
        try:
            os.replace(work, folder)
        except OSError:
            # Another process finished the same conversion first: keep theirs.
            if not is_converted(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
