"""A model's small JSON files (configs, scheduler settings), read before any weight, and what they decide.

Lives here: `read_json`, `vae_dtype`. May import: stdlib, torch, pipelines.diffusion.families (type hints).

Every checkpoint loader (a diffusers folder in `loading`, a single file in `single_file`, separate component
files in `pipelines.quant.split_files`) reads the same configs and applies the same rules, so they live here,
below all three.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from pipelines.diffusion.families import Family


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def vae_dtype(family: Family, vae_config: dict[str, Any], dtype: torch.dtype) -> torch.dtype:
    """SDXL's VAE overflows in float16 (`force_upcast` in its config): keep it in float32 then."""
    if dtype == torch.float16 and vae_config.get("force_upcast", False):
        return torch.float32
    return dtype
