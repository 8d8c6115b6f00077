"""The node types ComfyUI's LTX-2 templates need, in one tuple for the registry (issue 32).

Lives here: `NODES`. Imports `nodes.sigmas`, `nodes.ltx2_latents`, `nodes.ltx2_models`, `nodes.empty_image` (their NODES).
"""

from __future__ import annotations

from nodes.empty_image import NODES as EMPTY_IMAGE_NODES
from nodes.ltx2_latents import NODES as LATENT_NODES
from nodes.ltx2_models import NODES as MODEL_NODES
from nodes.sigmas import NODES as SIGMA_NODES
from nodes.spec import NodeSpec

NODES: tuple[NodeSpec, ...] = (*SIGMA_NODES, *LATENT_NODES, *MODEL_NODES, *EMPTY_IMAGE_NODES)
