"""Picture sizes a model wants: its native size and the multiple width/height must step by.

Lives here: `ImageSize`, `size_from_configs`, `config_patch_size`, `size_for_denoiser`, `size_for_model`.
May import: stdlib, safetensors, pipelines.paths, pipelines.diffusion.families / values.

Read from the model's own configs (a tiny built-in model is 64 px, SD1.x 512, SDXL 1024), falling back
to the family's figures. Only JSON and safetensors headers are read: the editor asks this on every
inspector refresh, and Empty Latent at run time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.diffusion.families import (
    CHECKPOINT_LAYOUTS,
    Family,
    detect_single_file_family,
    family_for_pipeline_class,
)
from pipelines.diffusion.values import DEFAULT_VAE_SCALE, DenoiserRef, vae_scale_factor


@dataclass(frozen=True)
class ImageSize:
    native: int  # pixels, square
    multiple: int  # width and height must be multiples of this


def size_from_configs(family: Family, denoiser_config: dict[str, Any], vae_scale: int) -> ImageSize:
    # Transformers cut latents into patches; Flux packs 2x2 latents without saying so in its config.
    patch = max(config_patch_size(denoiser_config), family.size_multiple // DEFAULT_VAE_SCALE)
    sample = denoiser_config.get("sample_size")
    native = int(sample) * vae_scale if isinstance(sample, int) and sample > 0 else family.native_size
    return ImageSize(native=native, multiple=vae_scale * patch)


def config_patch_size(denoiser_config: dict[str, Any]) -> int:
    """Latent pixels a side per token, as the config says: `patch_size`, or Z-Image's `all_patch_size`
    (the sizes it was trained with; pipelines call it with the first)."""
    sizes = denoiser_config.get("all_patch_size")
    if isinstance(sizes, list | tuple) and sizes:
        return int(sizes[0])
    patch = denoiser_config.get("patch_size") or 1
    return int(patch[-1] if isinstance(patch, list | tuple) else patch)  # video DiTs: (t, h, w)


def size_for_denoiser(denoiser: DenoiserRef) -> ImageSize:
    return size_from_configs(denoiser.family, denoiser.config, denoiser.vae_scale_factor)


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def size_for_model(spec: str) -> ImageSize | None:
    """The size for a Load Diffusion Model `path` value; None when it cannot be told cheaply."""
    from pipelines.paths import resolve_model_path

    try:
        path = resolve_model_path(spec)
        if path.is_dir():
            from pipelines.diffusion.family_detect import folder_index

            family = family_for_pipeline_class(
                _read(folder_index(path) or path / "model_index.json")["_class_name"]
            )
            config = _read(path / family.denoiser_subfolder / "config.json")
            return size_from_configs(family, config, vae_scale_factor(_read(path / "vae" / "config.json")))
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                family = CHECKPOINT_LAYOUTS[detect_single_file_family(f.keys())].family
            return ImageSize(family.native_size, family.size_multiple)
    except Exception:  # a missing or foreign file: the editor just shows no hint
        return None
    return None
