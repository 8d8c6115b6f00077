"""MiniMax H3's transformer: ComfyUI's tensor names -> diffusers' (what `comfy_layouts.keys` dispatches to).

Lives here: `transformer_to_diffusers` (re-exported by `comfy_layouts.minimax`, which has the rest of H3's
names). May import: torch, diffusers (its single-file converter), `comfy_layouts.prefix`. Its own module so that
`keys` can reach it without importing `minimax`'s writers (which import `keys`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pipelines.diffusion.comfy_layouts.prefix import strip_prefix


def transformer_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ComfyUI-layout H3 transformer state (stubs or tensors) in `MiniMaxH3Transformer3DModel`'s names."""
    from diffusers.loaders.single_file_utils import convert_minimax_h3_transformer_checkpoint_to_diffusers

    state = strip_prefix(state)
    table = {k: v for k, v in state.items() if k == "adaln_t_table"}
    rest = {k: v for k, v in state.items() if k != "adaln_t_table"}
    # Every published single file stores the fused qkv `[q; k; v]` stacked (diffusers' "stacked").
    out = convert_minimax_h3_transformer_checkpoint_to_diffusers(rest, config={}, qkv_layout="stacked")
    if table:  # the curve form's time embedding (minimax_load.CurveTimeEmbedding)
        out["time_embedder.table"] = table["adaln_t_table"]
    return out
