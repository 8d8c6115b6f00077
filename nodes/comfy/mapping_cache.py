"""ComfyUI's step-cache model patches (EasyCache, LazyCache) mapped onto the Sampler's `cache` field.

Lives here: `CACHE_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (PassThrough, helpers) and
`pipelines.diffusion.step_cache` (the easy cache's window; no torch).

ComfyUI patches the MODEL with the cache; Nodeloom's cache is a Sampler setting. So the node passes its
model through and annotates the wire: each sampler fed by it gets `cache: easy` and the node's
`reuse_threshold` as `cache_threshold` (nodes/comfy/convert.py applies it). LazyCache, ComfyUI's variant that
caches after guidance instead of per model call, becomes the same EasyCache (stated in the import notes).
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode
from nodes.comfy.mapping import MapContext, Mapper, PassThrough, _get
from pipelines.diffusion.step_cache import EASY_END_FRACTION as END_FRACTION
from pipelines.diffusion.step_cache import EASY_START_FRACTION as START_FRACTION


def _easy_cache(node: ComfyNode, ctx: MapContext) -> PassThrough:
    threshold = _get(node, "reuse_threshold", 0.2)
    start, end = _get(node, "start_percent", START_FRACTION), _get(node, "end_percent", END_FRACTION)
    if (start, end) != (START_FRACTION, END_FRACTION):
        ctx.graph.note(
            node,
            f"start_percent {start} / end_percent {end}: Nodeloom's easy cache uses a fixed window "
            f"({START_FRACTION} to {END_FRACTION} of the steps)",
        )
    if node.class_type == "LazyCache":
        ctx.graph.note(
            node, "approximated: LazyCache runs as EasyCache here (per denoiser call, not after guidance)"
        )
    return PassThrough({0: "model"}, {"cache": (threshold, node.id)})


CACHE_MAPPERS: dict[str, Mapper] = {"EasyCache": _easy_cache, "LazyCache": _easy_cache}
