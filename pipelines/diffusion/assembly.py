"""Model assembly: the one place a loaded model's wire values (`DenoiserRef`, `TextEncoderRef`, `VaeRef`)
are put together, whichever loader registered the handles.

Lives here: `LoadedModel`, `assemble_model`, `denoiser_ref`, `text_encoder_ref`, `vae_ref`, `resolve_precision`,
`vae_dtype`, `component_keys_for`, `read_json`. May import: stdlib, torch, memory, pipelines.model_keys,
pipelines.quant.formats (stdlib only), pipelines.diffusion.families/values.

The three loaders (a diffusers folder in `loading`, an original checkpoint in `single_file`, separate files in
`pipelines.quant.split_files`) each find weights their own way, and hand the handles and configs here. This
module is the one owner of what follows from them: the compute dtype and storage a `dtype` choice means
(`resolve_precision`; the VAE kept in float32 where its config says so), the scheduler settings (the config
folder's `scheduler/scheduler_config.json` unless given), the VAE scale factor (from the VAE config in the
config folder, `values.vae_scale_factor`), and every component's ledger and peak keys (`component_keys_for`,
built by `pipelines.model_keys` with one precision label convention).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory import ModelHandle
from pipelines.diffusion.families import Family, resolve_dtype
from pipelines.diffusion.values import (
    DEFAULT_VAE_SCALE,
    DenoiserRef,
    TextEncoderRef,
    TokenizerSource,
    VaeRef,
    vae_scale_factor,
)
from pipelines.model_keys import ComponentKeys, component_keys, precision_label
from pipelines.quant.formats import split_precision


@dataclass(frozen=True)
class LoadedModel:
    """What a checkpoint loader hands out: three wires' worth of lazy references."""

    denoiser: DenoiserRef
    text_encoder: TextEncoderRef
    vae: VaeRef


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def resolve_precision(choice: str, family: Family, device: torch.device | str) -> tuple[torch.dtype, str]:
    """A loader's `dtype` param -> (compute dtype, storage label or ""): "int8" computes at "auto"."""
    compute, storage = split_precision(choice)
    return resolve_dtype(compute, family, device), storage


def vae_dtype(family: Family, vae_config: dict[str, Any], dtype: torch.dtype) -> torch.dtype:
    """SDXL's VAE overflows in float16 (`force_upcast` in its config): keep it in float32 then."""
    if dtype == torch.float16 and vae_config.get("force_upcast", False):
        return torch.float32
    return dtype


def component_keys_for(
    source: Path | str, part: str, dtype: torch.dtype | None, storage: str = "", files: Iterable[Path] = ()
) -> ComponentKeys:
    """The ledger key `<source>#<part>@<precision>` and its location-free peak key (`pipelines.model_keys`)."""
    return component_keys(source, part, precision_label(dtype, storage), files)


def denoiser_ref(
    handle: ModelHandle,
    family: Family,
    config: dict[str, Any],
    config_dir: Path,
    dtype: torch.dtype,
    scheduler_config: dict[str, Any] | None = None,
) -> DenoiserRef:
    """The denoiser wire: its scheduler settings and pixels-per-latent come from `config_dir`."""
    vae_config = config_dir / "vae" / "config.json"
    return DenoiserRef(
        handle=handle,
        family=family,
        config=config,
        scheduler_config=scheduler_config or read_json(config_dir / "scheduler" / "scheduler_config.json"),
        dtype=dtype,
        vae_scale_factor=vae_scale_factor(read_json(vae_config))
        if vae_config.exists()
        else DEFAULT_VAE_SCALE,
    )


def text_encoder_ref(
    handles: Iterable[ModelHandle], tokenizers: Iterable[TokenizerSource], family: Family, dtype: torch.dtype
) -> TextEncoderRef:
    return TextEncoderRef(handles=tuple(handles), tokenizers=tuple(tokenizers), family=family, dtype=dtype)


def vae_ref(handle: ModelHandle, family: Family, config: dict[str, Any], dtype: torch.dtype) -> VaeRef:
    return VaeRef(handle=handle, family=family, config=config, dtype=dtype)


def assemble_model(
    family: Family,
    config_dir: Path,
    *,
    denoiser: ModelHandle,
    denoiser_config: dict[str, Any],
    text_encoders: Iterable[ModelHandle],
    tokenizers: Iterable[TokenizerSource],
    vae: ModelHandle,
    vae_config: dict[str, Any],
    dtype: torch.dtype,
    vae_dtype: torch.dtype,
) -> LoadedModel:
    """The three wires of a whole model whose configs (scheduler and VAE included) are in `config_dir`."""
    return LoadedModel(
        denoiser=denoiser_ref(denoiser, family, denoiser_config, config_dir, dtype),
        text_encoder=text_encoder_ref(text_encoders, tokenizers, family, dtype),
        vae=vae_ref(vae, family, vae_config, vae_dtype),
    )
