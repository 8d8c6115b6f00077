"""Every ComfyUI class the importer maps: the core table and the newer nodes' tables, merged.

Lives here: `ALL_MAPPERS`. Imports `nodes.comfy.mapping`, `nodes.comfy.mapping_sampling`,
`nodes.comfy.mapping_media`, `nodes.comfy.mapping_text`, `nodes.comfy.mapping_values`.
"""

from __future__ import annotations

from nodes.comfy.mapping import MAPPERS, Mapper
from nodes.comfy.mapping_media import MEDIA_MAPPERS
from nodes.comfy.mapping_qwen21 import QWEN21_MAPPERS
from nodes.comfy.mapping_sampling import SAMPLING_MAPPERS
from nodes.comfy.mapping_text import TEXT_MAPPERS
from nodes.comfy.mapping_values import VALUE_MAPPERS

ALL_MAPPERS: dict[str, Mapper] = {
    **MAPPERS,
    **SAMPLING_MAPPERS,
    **MEDIA_MAPPERS,
    **TEXT_MAPPERS,
    **VALUE_MAPPERS,
    **QWEN21_MAPPERS,  # last: it refines CLIPLoader and SamplerCustomAdvanced for Qwen-Image 2.1 graphs
}
