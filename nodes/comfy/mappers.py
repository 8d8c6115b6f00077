"""Every ComfyUI class the importer maps: the core table and the newer nodes' tables, merged.

Lives here: `ALL_MAPPERS`. Imports `nodes.comfy.mapping`, `nodes.comfy.mapping_sampling`,
`nodes.comfy.mapping_media`, `nodes.comfy.mapping_text`, `nodes.comfy.mapping_values`,
`nodes.comfy.mapping_ltx2`, `nodes.comfy.mapping_sigmas`, `nodes.comfy.mapping_cache`,
`nodes.comfy.mapping_wan`, `nodes.comfy.mapping_minimax` (later tables win: they delegate to the earlier),
`nodes.comfy.mapping_edit`, `nodes.comfy.mapping_flux3`.
"""

from __future__ import annotations

from nodes.comfy.mapping import MAPPERS, Mapper
from nodes.comfy.mapping_batch import BATCH_MAPPERS
from nodes.comfy.mapping_cache import CACHE_MAPPERS
from nodes.comfy.mapping_camera import CAMERA_MAPPERS
from nodes.comfy.mapping_canny import CANNY_MAPPERS
from nodes.comfy.mapping_edit import EDIT_MAPPERS
from nodes.comfy.mapping_flux3 import flux3_mappers
from nodes.comfy.mapping_ltx2 import LTX2_MAPPERS
from nodes.comfy.mapping_media import MEDIA_MAPPERS
from nodes.comfy.mapping_minimax import MINIMAX_MAPPERS
from nodes.comfy.mapping_qwen21 import qwen21_mappers
from nodes.comfy.mapping_sampling import SAMPLING_MAPPERS
from nodes.comfy.mapping_sigmas import SIGMA_MAPPERS
from nodes.comfy.mapping_text import TEXT_MAPPERS
from nodes.comfy.mapping_turbo import turbo_mappers
from nodes.comfy.mapping_values import VALUE_MAPPERS
from nodes.comfy.mapping_wan import WAN_MAPPERS

ALL_MAPPERS: dict[str, Mapper] = {
    **MAPPERS,
    **SAMPLING_MAPPERS,
    **MEDIA_MAPPERS,
    **TEXT_MAPPERS,
    **VALUE_MAPPERS,
    **LTX2_MAPPERS,  # LTX-2's nodes; CLIPLoader, guiders and VAE decodes of LTX-2 graphs (issue 32)
    **SIGMA_MAPPERS,  # SIGMAS nodes; custom samplers with one, the rest delegated (issue 32)
    **CACHE_MAPPERS,
    **WAN_MAPPERS,
    **BATCH_MAPPERS,
    **MINIMAX_MAPPERS,
    **EDIT_MAPPERS,  # Qwen-Image-Edit's prompts, the Kontext nodes, ImageStitch alone (issue 32)
    **CAMERA_MAPPERS,  # CameraAngle: its prompt text, a constant (issue 32)
    **CANNY_MAPPERS,  # Canny: ComfyUI's (kornia's) edges (issue 32)
}
ALL_MAPPERS |= flux3_mappers(ALL_MAPPERS)  # FLUX.3's layout-prompt helper, off the picture's path
# Last: Qwen-Image 2.1's nodes, and CLIPLoader / ManualSigmas / SamplerCustomAdvanced / BatchImagesNode in its
# graphs, delegating to the mappers above elsewhere.
ALL_MAPPERS |= qwen21_mappers(ALL_MAPPERS)
ALL_MAPPERS |= turbo_mappers(ALL_MAPPERS)  # SDTurboScheduler onto 'simple' where it is the same (issue 32)
