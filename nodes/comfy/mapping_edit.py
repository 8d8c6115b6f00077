"""ComfyUI's editing nodes of the image templates (Qwen-Image-Edit, FLUX.1 Kontext), mapped onto Nodeloom's.

Lives here: `EDIT_MAPPERS`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit, PassThrough and
helpers).

- TextEncodeQwenImageEdit / TextEncodeQwenImageEditPlus -> ours of the same names (nodes/qwenimage_edit.py):
  `clip` is our `text_encoder`, `prompt`, `vae` and the pictures keep their names.
- FluxKontextImageScale -> ours (nodes/comfy/edit_nodes.py).
- ImageStitch with no second picture (the Kontext template's second Load Image is bypassed) -> wired through:
  ComfyUI's node returns image1 as it is then; two pictures stitched are not done here (the node is refused).
- FluxKontextMultiReferenceLatentMethod -> ours, ReferenceLatentMethod (nodes/flux2.py): the method rides on
  the conditioning. Krea 2 reads it as ComfyUI's model does (its references count only with a method); the
  other edit models place their references as their diffusers pipelines do (2511's `zero_cond_t` config is
  ComfyUI's "index_timestep_zero"), which ComfyUI's own template note says its own files need no node for.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, PassThrough, _emit, _get, unsupported_emit

# ComfyUI's reference_latents_method values; the models' own placement is one of these.
_REFERENCE_METHODS = ("offset", "index", "uxo/uno", "index_timestep_zero")


def _text_encode_qwen_edit(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(
        node, "TextEncodeQwenImageEdit", {}, ("conditioning",), text_encoder="clip", vae="vae", image="image"
    )


def _text_encode_qwen_edit_plus(node: ComfyNode, ctx: MapContext) -> Emit:
    pictures = {name: name for name in ("image1", "image2", "image3")}
    return _emit(
        node, "TextEncodeQwenImageEditPlus", {}, ("conditioning",), text_encoder="clip", vae="vae", **pictures
    )


def _kontext_image_scale(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "FluxKontextImageScale", {}, ("image",), image="image")


def _image_stitch(node: ComfyNode, ctx: MapContext) -> Emit | PassThrough:
    if isinstance(node.inputs.get("image2"), LinkRef):
        return unsupported_emit(node, "stitching a second picture is not done here (only image1 alone)")
    ctx.graph.note(node, "no image2: image1 passes through unchanged, as ComfyUI's ImageStitch returns it")
    return PassThrough({0: "image1"})


def _reference_method(node: ComfyNode, ctx: MapContext) -> Emit | PassThrough:
    method = _get(node, "reference_latents_method", "offset")
    if method not in _REFERENCE_METHODS:
        ctx.graph.note(
            node,
            f"approximated: reference_latents_method {method!r} is not one ComfyUI has; the model's own "
            "placement is used",
        )
        return PassThrough({0: "conditioning"})
    ctx.graph.note(
        node,
        f"reference_latents_method {method!r}: Krea 2 places its references so; the other edit models as "
        "their own pipelines do (ComfyUI's files need no such node)",
    )
    return _emit(
        node,
        "ReferenceLatentMethod",
        {"reference_latents_method": method},
        ("conditioning",),
        conditioning="conditioning",
    )


EDIT_MAPPERS: dict[str, Mapper] = {
    "TextEncodeQwenImageEdit": _text_encode_qwen_edit,
    "TextEncodeQwenImageEditPlus": _text_encode_qwen_edit_plus,
    "FluxKontextImageScale": _kontext_image_scale,
    "FluxKontextMultiReferenceLatentMethod": _reference_method,
    "ImageStitch": _image_stitch,
}
