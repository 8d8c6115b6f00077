"""ComfyUI's checkpoint prefix on a diffusion model's tensor names (`model.diffusion_model.`), and removing it.

Lives here: `PREFIXES`, `strip_prefix`. May import: stdlib, torch (types only). Its own module so that a
family's key map (e.g. `comfy_layouts.minimax`) can use it while `comfy_layouts.keys` dispatches to that map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PREFIXES = ("model.diffusion_model.", "diffusion_model.")


def strip_prefix(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors without ComfyUI's checkpoint prefix (when every key has it)."""
    for prefix in PREFIXES:
        if state and all(k.startswith(prefix) for k in state):
            return {k.removeprefix(prefix): v for k, v in state.items()}
    return dict(state)
