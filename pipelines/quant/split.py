"""Registering components kept in 8 bits or loaded from split files, as lazy memory-manager handles.

Lives here: `module_factory`, `register_built`, `register_quantized_folder_component`.
May import: stdlib, torch, diffusers, transformers, memory, pipelines.quant.

Every builder here goes through `meta_load.build_from_tensors`. A component kept in 8 bits (or GGUF) is
registered with `storage` set and no files: the manager counts its bytes from the built module (the stored
bytes), never casts it, and does not stream it from disk on CPU (the files hold full-precision tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.diffusion.assembly import component_keys_for
from pipelines.diffusion.family_types import ClassRef
from pipelines.quant.tensor_files import SafetensorsTensors


def module_factory(model_class: type | ClassRef, config_dir: Path) -> Callable[[], torch.nn.Module]:
    """A function building `model_class` (diffusers or transformers) from `config_dir/config.json`, offline.
    A `ClassRef` is imported and its config read when the function is called (`app plan` registers without)."""
    if isinstance(model_class, ClassRef):
        ref = model_class
        return lambda: module_factory(ref.load(), config_dir)()
    from diffusers import ModelMixin

    if issubclass(model_class, ModelMixin):
        config = model_class.load_config(str(config_dir), local_files_only=True)
        return lambda: model_class.from_config(config)
    config = model_class.config_class.from_pretrained(str(config_dir), local_files_only=True)
    return lambda: model_class(config)


def _planned(storage: str, dtype: torch.dtype, files: tuple[Path, ...]) -> int | None:
    """8-bit storage read from safetensors files: its bytes from their headers (the plan's, before a build)."""
    if storage not in ("int8", "fp8_e4m3fn", "fp8_e5m2") or not files:
        return None
    if not all(Path(f).suffix == ".safetensors" for f in files):
        return None
    from pipelines.quant.planned_bytes import stored_header_bytes

    return stored_header_bytes(files, storage, dtype)


def register_built(
    mm: MemoryManager,
    *,
    origin: Path,
    part: str,
    name: str,
    kind: str,
    make: Callable[[], torch.nn.Module],
    tensors: Callable[[], Mapping[str, torch.Tensor]],
    dtype: torch.dtype,
    storage: str,
    source: str,
    files: tuple[Path, ...] = (),
    blocks: tuple[str, ...] = (),
    identity_files: tuple[Path, ...] = (),
    planned_bytes: int | None = None,
) -> ModelHandle:
    """Register a component built by `build_from_tensors(make, tensors())` when first used.

    `origin` and `part` key it (`assembly.component_keys_for`); `identity_files`: the files it is read from
    when they are fewer than everything under `origin` (one subfolder of a folder).

    `files`: the safetensors files when their tensors are exactly the module's (diffusers names, plain
    storage): then the manager knows the bytes before loading and can stream blocks from disk on CPU.
    `planned_bytes`: the stored bytes estimated from the headers where `files` is not given (8-bit storage).
    """

    def build() -> torch.nn.Module:
        from pipelines.quant.meta_load import build_from_tensors  # here: it imports diffusers' hooks (int8)

        return build_from_tensors(make, tensors(), compute_dtype=dtype, storage=storage, source=source)

    return mm.register(
        ComponentSpec(
            **component_keys_for(origin, part, dtype, storage, identity_files or files).spec_fields(),
            name=name,
            kind=kind,
            build=build,
            files=() if storage else files,
            dtype=dtype,
            blocks=blocks,
            storage=storage,
            planned_bytes=planned_bytes,
        )
    )


def register_quantized_folder_component(
    mm: MemoryManager,
    root: Path,
    subfolder: str,
    model_class: type,
    files: tuple[Path, ...],
    *,
    kind: str,
    dtype: torch.dtype,
    storage: str,
    blocks: tuple[str, ...] = (),
) -> ModelHandle:
    """A diffusers-folder component kept in `storage` (fp8/int8), read tensor by tensor from its files."""
    return register_built(
        mm,
        origin=root,
        part=subfolder,
        identity_files=files,
        name=subfolder,
        kind=kind,
        make=module_factory(model_class, root / subfolder),
        tensors=lambda: SafetensorsTensors(files),
        dtype=dtype,
        storage=storage,
        source=str(root / subfolder),
        blocks=blocks,
        planned_bytes=_planned(storage, dtype, files),  # the folder's files hold exactly this component
    )
