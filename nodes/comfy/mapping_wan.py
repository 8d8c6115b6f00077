"""ComfyUI's Wan nodes mapped onto Nodeloom's (nodes/wan_video.py), and the Wan variants that stay unsupported.

Lives here: `WAN_MAPPERS`. Imports `nodes.comfy.graph` and `nodes.comfy.mapping` (Emit and helpers).

- WanImageToVideo / WanFirstLastFrameToVideo / Wan22ImageToVideoLatent -> ours of the same names (the same
  widgets: width, height, length, batch_size; the same outputs). ComfyUI carries the start/last frames on the
  conditioning; ours carries them on the latent wire, which reaches both samplers of a Wan 2.2 A14B template
  (the high-noise KSamplerAdvanced hands its latent, frames included, to the low-noise one).
- CLIPVisionLoader / CLIPVisionEncode -> Load CLIP Vision / CLIP Vision Encode (nodes/clip_vision.py): Wan 2.1
  I2V's image encoder from `models/clip_vision/`, wired into Wan Image To Video's `clip_vision_output` (First
  Last Frame's two); the sampler encodes the picture with it. Crop "none" (a stretch to the encoder's size) is
  center-cropped here, said.
- The two-file Wan 2.2 A14B layout (two UNETLoaders, two KSamplerAdvanced with start/end steps) needs no
  mapper of its own: each expert is a LoadDenoiser, each segment a SamplerAdvanced, and the Wan loop runs
  the segment [start, end) of the one schedule (pipelines/diffusion/wan_sampling.py), so the two segments
  give the picture of one two-expert run switching at the same step.
- The Wan variants whose models Nodeloom does not run (Animate, SCAIL, VACE, S2V, ...) keep their placeholder,
  with the reason said; `nodes.comfy.wan_variants` reports their family to the check.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, _emit, _get, unsupported_emit

_SIZE = ("width", "height", "length", "batch_size")


def _size_params(node: ComfyNode) -> dict[str, object]:
    # Our params declare these ComfyUI widget names; listed so a wired widget becomes an input of that name.
    return {name: node.inputs[name] for name in _SIZE if name in node.inputs}


def _missing(node: ComfyNode, *images: str) -> str | None:
    absent = [name for name in images if not isinstance(node.inputs.get(name), LinkRef)]
    return ", ".join(absent) or None


def _wan_i2v(node: ComfyNode, ctx: MapContext) -> Emit:
    if (absent := _missing(node, "start_image")) is not None:
        return unsupported_emit(node, f"no {absent} wired: Nodeloom's Wan Image To Video needs a start image")
    return _emit(
        node,
        "WanImageToVideo",
        _size_params(node),
        ("positive", "negative", "latent"),
        positive="positive",
        negative="negative",
        vae="vae",
        start_image="start_image",
        clip_vision_output="clip_vision_output",
    )


def _wan_flf(node: ComfyNode, ctx: MapContext) -> Emit:
    if (absent := _missing(node, "start_image", "end_image")) is not None:
        return unsupported_emit(
            node, f"no {absent} wired: Nodeloom's Wan First Last Frame To Video needs both frames"
        )
    return _emit(
        node,
        "WanFirstLastFrameToVideo",
        _size_params(node),
        ("positive", "negative", "latent"),
        positive="positive",
        negative="negative",
        vae="vae",
        start_image="start_image",
        end_image="end_image",
        clip_vision_start_image="clip_vision_start_image",
        clip_vision_end_image="clip_vision_end_image",
    )


def _wan22_latent(node: ComfyNode, ctx: MapContext) -> Emit:
    if _get(node, "batch_size", 1) not in (1, None):
        ctx.graph.note(node, f"batch_size {_get(node, 'batch_size')}: one latent per video, as ComfyUI")
    return _emit(
        node, "Wan22ImageToVideoLatent", _size_params(node), ("latent",), vae="vae", start_image="start_image"
    )


def _clip_vision_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LoadCLIPVision", {}, ("clip_vision",))  # path: clip_name (declared)


def _clip_vision_encode(node: ComfyNode, ctx: MapContext) -> Emit:
    if _get(node, "crop", "center") == "none":
        ctx.graph.note(
            node, "crop 'none': the picture is center-cropped here, as the encoder's processor does"
        )
    return _emit(
        node, "CLIPVisionEncode", {}, ("clip_vision_output",), clip_vision="clip_vision", image="image"
    )


WAN_MAPPERS: dict[str, Mapper] = {
    "CLIPVisionLoader": _clip_vision_loader,
    "CLIPVisionEncode": _clip_vision_encode,
    "WanImageToVideo": _wan_i2v,
    "WanFirstLastFrameToVideo": _wan_flf,
    "Wan22ImageToVideoLatent": _wan22_latent,
}
