"""ComfyUI's value, preview and patch nodes of the 2026 templates, mapped onto Nodeloom's.

Lives here: `VALUE_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit, PassThrough and
helpers), `nodes.comfy.value_nodes` (`evaluate_expression`, for constant expressions).

- GetImageSize -> Image Size; ComfyMathExpression -> Math Expression (its `values.a`, `values.b`, ... wires
  are our a-d; nodes/comfy/value_nodes.py); with constant values only it is resolved at import (its
  consumers take the result), with some wired the constants are written into the expression.
- SaveImageAdvanced -> Save Image (8-bit sRGB PNG; other formats and depths are said).
- ImageCompare (an editor widget showing two pictures) -> Preview Image of the first, said.
- DifferentialDiffusion (a soft-mask inpainting patch on the model) -> wired through, said.
- VAEEncodeTiled -> VAE Encode (whole, not tiled), said.
- ReferenceLatent -> ours (FLUX.2's reference pictures); EmptyHunyuanLatentVideo -> Empty Video Latent.
- ResizeImageMaskNode (images) -> Scale Image, Scale Image to Pixels, Scale Image By or Scale Image to
  Side, by its resize type.
"""

from __future__ import annotations

import re

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import (
    Constant,
    Emit,
    MapContext,
    Mapper,
    PassThrough,
    _emit,
    _get,
    _save_image,
    unsupported_emit,
)
from nodes.comfy.value_nodes import evaluate_expression

_EXPRESSION_VALUES = ("a", "b", "c", "d")


def _image_size(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "GetImageSize", {}, ("width", "height", "batch_size"), image="image")


def _math_expression(node: ComfyNode, ctx: MapContext) -> Emit | Constant:
    named = {k.removeprefix("values."): v for k, v in node.inputs.items() if k.startswith("values.")}
    extra = sorted(set(named) - set(_EXPRESSION_VALUES))
    if extra:
        return unsupported_emit(node, f"values {', '.join(extra)}: Math Expression takes a-d")
    expression = _get(node, "expression", "a")
    numbers = {k: v for k, v in named.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    if isinstance(expression, str) and numbers and not any(isinstance(v, LinkRef) for v in named.values()):
        try:  # every value a constant: resolved at import, its consumers take the result
            result = evaluate_expression(expression, numbers)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError):
            pass
        else:
            ctx.graph.note(node, f"resolved at import: {expression} = {result!r} ({_shown(numbers)})")
            return Constant({0: float(result), 1: int(result), 2: bool(result)})
    if isinstance(expression, str) and numbers:  # some wired: the constants written into the expression
        expression = re.sub(
            r"\b([abcd])\b", lambda m: repr(numbers[m[1]]) if m[1] in numbers else m[0], expression
        )
        ctx.graph.note(node, f"constant values written into the expression: {expression}")
    params = {"expression": expression} if numbers else {}
    emit = _emit(node, "MathExpression", params, ("float", "int", "bool"))  # expression: declared
    for name, value in named.items():
        if isinstance(value, LinkRef):
            emit.inputs[name] = value
        elif value is not None and name not in numbers:
            ctx.graph.note(node, f"value {name} is the constant {value!r}: wire a primitive into {name}")
    return emit


def _shown(numbers: dict[str, int | float]) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in sorted(numbers.items()))


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


# ResizeImageMaskNode's `resize_type` (a dynamic combo) -> our node and its params' ComfyUI widgets, in the
# order a UI file stores them after the choice (scale_method always last).
_RESIZE_TYPES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "scale dimensions": ("ImageScale", (("width", "width"), ("height", "height"), ("crop", "crop"))),
    "scale total pixels": ("ImageScaleToTotalPixels", (("megapixels", "megapixels"),)),
    "scale by multiplier": ("ImageScaleBy", (("multiplier", "scale"),)),
    "scale longer dimension": ("ImageScaleToSide", (("longer_size", "size"),)),
    "scale shorter dimension": ("ImageScaleToSide", (("shorter_size", "size"),)),
}
_SIDES = {"scale longer dimension": "longer", "scale shorter dimension": "shorter"}


def _resize_image_mask(node: ComfyNode, ctx: MapContext) -> Emit:
    inputs = dict(node.inputs)
    values = inputs.pop("widgets_values", None)
    choice = values[0] if isinstance(values, list) and values else inputs.get("resize_type")
    if choice is None:  # nothing stored: ComfyUI's first option, its defaults unless given
        choice = "scale dimensions"
        ctx.graph.note(
            node, "no stored resize type: ComfyUI's default, scale dimensions (512x512 unless set)"
        )
        inputs = {"resize_type.width": 512, "resize_type.height": 512, "crop": "center"} | inputs
    if not isinstance(choice, str) or choice not in _RESIZE_TYPES:
        return unsupported_emit(
            node, f"resize type {choice!r}: only {', '.join(_RESIZE_TYPES)} map onto ours"
        )
    type_, widgets = _RESIZE_TYPES[choice]
    if isinstance(values, list):  # UI format: the choice's options, then scale_method
        named = dict(zip([w for w, _ in widgets] + ["scale_method"], values[1:], strict=False))
        inputs |= {f"resize_type.{k}": v for k, v in named.items() if k != "scale_method"}
        inputs.setdefault("scale_method", named.get("scale_method"))
    params = {ours: inputs.get(f"resize_type.{theirs}", inputs.get(theirs)) for theirs, ours in widgets}
    params["method"] = inputs.get("scale_method") or "lanczos"
    if choice in _SIDES:
        params["side"] = _SIDES[choice]
    constants = {k: v for k, v in params.items() if not isinstance(v, LinkRef) and v is not None}
    wired = {k: v for k, v in params.items() if isinstance(v, LinkRef)}
    image = {"image": inputs["input"]} if isinstance(inputs.get("input"), LinkRef) else {}
    return Emit(type_, constants, {**image, **wired}, ("image",))


def _reference_latent(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ReferenceLatent", {}, ("conditioning",), conditioning="conditioning", latent="latent")


def _empty_video_latent(node: ComfyNode, ctx: MapContext) -> Emit:
    """EmptyHunyuanLatentVideo (Wan and HunyuanVideo templates) -> Empty Video Latent; ours sizes the
    latent from a VAE, which the converter wires in (nodes.comfy.convert: the graph's VAE)."""
    if _get(node, "batch_size", 1) not in (1, None):
        ctx.graph.note(node, f"batch_size {_get(node, 'batch_size')} becomes 1 (one video per run here)")
    params = {
        "width": _get(node, "width", 848),
        "height": _get(node, "height", 480),
        "frames": _get(node, "length", 25),
    }
    return _emit(node, "EmptyVideoLatent", params, ("latent",))


VALUE_MAPPERS: dict[str, Mapper] = {
    "ReferenceLatent": _reference_latent,
    "EmptyHunyuanLatentVideo": _empty_video_latent,
    "ResizeImageMaskNode": _resize_image_mask,
    "GetImageSize": _image_size,
    "ComfyMathExpression": _math_expression,
    "SaveImageAdvanced": _save_image_advanced,
    "ImageCompare": _image_compare,
    "DifferentialDiffusion": _differential_diffusion,
    "VAEEncodeTiled": _vae_encode_tiled,
}
