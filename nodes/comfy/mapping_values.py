"""ComfyUI's value, preview and patch nodes of the 2026 templates, mapped onto Nodeloom's.

Lives here: `VALUE_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit, PassThrough and
helpers).

- GetImageSize -> Image Size; ComfyMathExpression -> Math Expression (its `values.a`, `values.b`, ... wires
  are our a-d; nodes/comfy/value_nodes.py).
- SaveImageAdvanced -> Save Image (8-bit sRGB PNG; other formats and depths are said).
- ImageCompare (an editor widget showing two pictures) -> Preview Image of the first, said.
- DifferentialDiffusion (a soft-mask inpainting patch on the model) -> wired through, said.
- VAEEncodeTiled -> VAE Encode (whole, not tiled), said.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import (
    Emit,
    MapContext,
    Mapper,
    PassThrough,
    _emit,
    _get,
    _save_image,
    unsupported_emit,
)

_EXPRESSION_VALUES = ("a", "b", "c", "d")


def _image_size(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "GetImageSize", {}, ("width", "height", "batch_size"), image="image")


def _math_expression(node: ComfyNode, ctx: MapContext) -> Emit:
    named = {k.removeprefix("values."): v for k, v in node.inputs.items() if k.startswith("values.")}
    extra = sorted(set(named) - set(_EXPRESSION_VALUES))
    if extra:
        return unsupported_emit(node, f"values {', '.join(extra)}: Math Expression takes a-d")
    emit = _emit(node, "MathExpression", {}, ("float", "int", "bool"))  # expression: declared
    for name, value in named.items():
        if isinstance(value, LinkRef):
            emit.inputs[name] = value
        elif value is not None:
            ctx.graph.note(node, f"value {name} is the constant {value!r}: wire a primitive into {name}")
    return emit


def _save_image_advanced(node: ComfyNode, ctx: MapContext) -> Emit:
    options = {"format": ("png",), "bit_depth": ("8-bit",), "color_space": ("sRGB",)}
    for name, usual in options.items():
        value = _get(node, name)
        if isinstance(value, str) and value not in usual:
            ctx.graph.note(node, f"approximated: {name} {value!r} is written as an 8-bit sRGB PNG here")
    return _save_image(node, ctx)


def _image_compare(node: ComfyNode, ctx: MapContext) -> Emit:
    ctx.graph.note(node, "approximated: ImageCompare shows image_a only here (a Preview Image)")
    return _emit(node, "PreviewImage", {}, (), image="image_a")


def _differential_diffusion(node: ComfyNode, ctx: MapContext) -> PassThrough:
    ctx.graph.note(
        node,
        "approximated: DifferentialDiffusion is not applied; a noise mask inpaints with a hard edge here",
    )
    return PassThrough({0: "model"})


def _vae_encode_tiled(node: ComfyNode, ctx: MapContext) -> Emit:
    ctx.graph.note(node, f"approximated: encoded whole, not in {_get(node, 'tile_size', 512)}px tiles")
    return _emit(node, "VAEEncode", {}, ("latent",), vae="vae", image="pixels")


VALUE_MAPPERS: dict[str, Mapper] = {
    "GetImageSize": _image_size,
    "ComfyMathExpression": _math_expression,
    "SaveImageAdvanced": _save_image_advanced,
    "ImageCompare": _image_compare,
    "DifferentialDiffusion": _differential_diffusion,
    "VAEEncodeTiled": _vae_encode_tiled,
}
