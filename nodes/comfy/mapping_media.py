"""ComfyUI's video nodes, its switch and its size helpers, mapped onto Nodeloom's nodes (or resolved at
import when their value is a constant).

Lives here: `MEDIA_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit, PassThrough,
Constant and helpers) and `nodes.comfy.size_nodes` (the size arithmetic).

- SaveVideo / CreateVideo / LoadVideo -> our SaveVideo / CreateVideo / LoadVideo (nodes/video.py): ComfyUI's
  format "auto" writes mp4 here, as ComfyUI's does.
- ComfySwitchNode with a constant `switch` is resolved at import: its output is the chosen input (a switch
  fed by a wire stays unsupported, naming why).
- ResolutionSelector (constant widgets) becomes the width and height it computes, taken by its consumers.
- ImageScaleToTotalPixels -> our node of that name; VAEDecodeTiled -> ours (tile size kept, overlap ours);
  GetVideoComponents -> Video to Frames; PreviewAny -> Show Text (text only); the Primitive* nodes -> ours.
"""

from __future__ import annotations

import re
from typing import Any

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Constant, Emit, MapContext, Mapper, PassThrough, _emit, _get, unsupported_emit
from nodes.comfy.size_nodes import ratio_size

# ComfyUI SaveVideo `format` -> ours ("auto" is mp4 in ComfyUI too).
_VIDEO_FORMATS = {"auto": "mp4", "mp4": "mp4", "webm": "webm"}


def _save_video(node: ComfyNode, ctx: MapContext) -> Emit:
    prefix = _get(node, "filename_prefix", "ComfyUI")
    if isinstance(prefix, str):
        # ComfyUI allows sub-folders ("video/ComfyUI"); our prefix is a plain file name in the output folder.
        clean = re.sub(r"[^A-Za-z0-9._-]+", "_", prefix).strip("._") or "ComfyUI"
        if clean != prefix:
            ctx.graph.note(
                node, f"filename_prefix {prefix!r} becomes {clean!r} (a plain name in the output folder)"
            )
        prefix = clean
    params: dict[str, Any] = {"prefix": prefix}
    fmt, codec = _get(node, "format", "auto"), _get(node, "codec", "auto")
    if isinstance(fmt, str):
        params["format"] = _VIDEO_FORMATS.get(fmt, "mp4")
        if fmt not in _VIDEO_FORMATS:
            ctx.graph.note(node, f"format {fmt!r} is written as mp4 here")
    if isinstance(codec, str) and codec not in ("auto", "h264"):
        ctx.graph.note(node, f"codec {codec!r}: Nodeloom writes H.264 in mp4, VP9 in webm")
    return _emit(node, "SaveVideo", params, (), video="video")


def _create_video(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(
        node, "CreateVideo", {"fps": _get(node, "fps", 30.0)}, ("video",), frames="images", audio="audio"
    )


def _load_video(node: ComfyNode, ctx: MapContext) -> Emit:
    video = _get(node, "file", "")
    ctx.graph.note(
        node,
        f"video {video!r} is looked up in ComfyUI's input/ folder beside the models folders (--models-dir "
        "the ComfyUI install); set the path to use a video elsewhere",
    )
    return _emit(node, "LoadVideo", {"path": video}, ("video",))


def _switch(node: ComfyNode, ctx: MapContext) -> PassThrough | Emit:
    choice = _get(node, "switch", False)
    source = ctx.graph.nodes.get(choice.node) if isinstance(choice, LinkRef) else None
    if source is not None and source.class_type == "PrimitiveBoolean":  # a constant by another name
        choice = source.inputs.get("value")
    if not isinstance(choice, bool):
        return unsupported_emit(
            node, "its switch is fed by a wire; only a constant switch is resolved at import"
        )
    chosen = "on_true" if choice else "on_false"
    ctx.graph.note(node, f"switch {choice}: resolved at import to its {chosen!r} input")
    return PassThrough({0: chosen})


def _resolution(node: ComfyNode, ctx: MapContext) -> Constant | Emit:
    ratio, mp, multiple = (
        _get(node, "aspect_ratio"),
        _get(node, "megapixels", 1.0),
        _get(node, "multiple_of", 8),
    )
    size = None
    if isinstance(ratio, str) and isinstance(mp, int | float) and isinstance(multiple, int):
        size = ratio_size(ratio, float(mp), multiple)
    if size is None:
        return unsupported_emit(
            node, "its aspect ratio, megapixels or multiple is not a constant Nodeloom can read"
        )
    ctx.graph.note(
        node, f"resolved at import: {size[0]}x{size[1]} ({ratio}, {mp} MP, multiple of {multiple})"
    )
    return Constant({0: size[0], 1: size[1]})


def _scale_to_pixels(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ImageScaleToTotalPixels", {}, ("image",), image="image")  # widgets: declared


def _video_components(node: ComfyNode, ctx: MapContext) -> Emit:
    # ComfyUI's outputs: images, audio, fps (newer: bit_depth, color_space, which Nodeloom does not offer).
    return _emit(node, "VideoToFrames", {}, ("frames", "audio", "fps", None, None), video="video")


def _vae_decode_tiled(node: ComfyNode, ctx: MapContext) -> Emit:
    tile = _get(node, "tile_size", 512)
    ctx.graph.note(
        node,
        f"approximated: decoded in {tile}px tiles with Nodeloom's own overlap (overlap "
        f"{_get(node, 'overlap', 64)} and the temporal tiling widgets are not used)",
    )
    params = {"tiling": "on", "tile_size": tile}
    return _emit(node, "VAEDecodeTiled", params, ("image",), vae="vae", latent="samples")


def _preview_any(node: ComfyNode, ctx: MapContext) -> Emit | PassThrough:
    # Newer ComfyUI passes the value on: when another node reads it (the Qwen-Image 2.1 templates' prompt),
    # the data flow is kept and the preview left out.
    if any(
        isinstance(v, LinkRef) and v.node == node.id
        for n in ctx.graph.nodes.values()
        for v in n.inputs.values()
    ):
        ctx.graph.note(node, "PreviewAny passes its value on here; its preview is left out")
        return PassThrough({0: "source"})
    ctx.graph.note(node, "PreviewAny shows text here (Show Text); a value that is not text fails the check")
    return _emit(node, "ShowText", {}, (), text="source")


# ComfyUI's core primitive nodes -> ours (their one widget is `value`, our params' declared ComfyUI name).
_PRIMITIVES = {
    "PrimitiveInt": ("Int", "value"),
    "PrimitiveFloat": ("Float", "value"),
    "PrimitiveBoolean": ("Bool", "value"),
    "PrimitiveString": ("Text", "text"),
    "PrimitiveStringMultiline": ("Text", "text"),
}


def _primitive(node: ComfyNode, ctx: MapContext) -> Emit:
    type_, output = _PRIMITIVES[node.class_type]
    return _emit(node, type_, {}, (output,))


MEDIA_MAPPERS: dict[str, Mapper] = {
    **dict.fromkeys(_PRIMITIVES, _primitive),
    "GetVideoComponents": _video_components,
    "VAEDecodeTiled": _vae_decode_tiled,
    "PreviewAny": _preview_any,
    "SaveVideo": _save_video,
    "CreateVideo": _create_video,
    "LoadVideo": _load_video,
    "ComfySwitchNode": _switch,
    "ResolutionSelector": _resolution,
    "ImageScaleToTotalPixels": _scale_to_pixels,
}
