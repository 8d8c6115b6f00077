"""ComfyUI's MiniMax H3 nodes onto ours.

Lives here: `MINIMAX_MAPPERS`, `is_minimax_graph`. Imports `nodes.comfy.graph` and `nodes.comfy.mapping` (Emit,
PassThrough, the helpers, the core EmptyLatentImage mapper).

- MiniMaxH3ImageToVideo -> our MiniMax H3 Image to Video (nodes/minimax.py): clip -> text_encoder, the
  optional first/last frames, prompt/width/height/length; outputs positive and the latent.
- MiniMaxH3SigmaShift -> MiniMax H3 Sigma Shift (the two schedules' shifts).
- VAEDecodeAudio -> VAE Decode Audio: the sound track of the sampled latent. ComfyUI wires the audio VAE's
  file here; ours decodes with the audio VAE of the model folder the VAE came from.
- ModelAttentionBackend -> passes the model through (an attention kernel choice: the math is the same),
  noted.
- MiniMaxH3ReferenceToVideo -> MiniMax H3 Reference to Video: clip -> text_encoder, vae, audio_vae, the
  Autogrow pictures `ref_images.ref_image_0` ... in their `N` order as ref_image_1 ... ref_image_9,
  prompt/width/height/length/ref_image_size; a reference video or sound wired (`ref_videos.*`,
  `ref_video_audios.*`, `ref_audios.*`) is refused with the reason (not done here yet).
- EmptyLatentImage in a MiniMax H3 graph (`image_minimax_h3_t2i`) -> Empty Latent as elsewhere, noted: the
  sampler makes it a still, one latent frame with no sound rows (`minimax_vae.still_request`).
"""

from __future__ import annotations

import re

from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.mapping import MAPPERS, Emit, MapContext, Mapper, PassThrough, _emit, _get, unsupported_emit


def is_minimax_graph(graph: ComfyGraph) -> bool:
    """Whether the workflow runs MiniMax H3: it holds its text encoder's loader (CLIPLoader type `minimax`) or
    one of its nodes (MiniMaxH3ImageToVideo, ...)."""
    return any(
        node.class_type.startswith("MiniMaxH3")
        or (node.class_type == "CLIPLoader" and node.inputs.get("type") == "minimax")
        for node in graph.nodes.values()
    )


def _empty_latent_image(node: ComfyNode, ctx: MapContext) -> Emit:
    emit = MAPPERS["EmptyLatentImage"](node, ctx)
    if is_minimax_graph(ctx.graph):
        ctx.graph.note(
            node,
            "MiniMax H3 still: the sampler denoises this as one latent frame with no sound rows (the packed "
            "sequence is text + video, as H3 is trained on pictures); diffusers' pipeline has no still, and "
            "ComfyUI's run of it was not compared",
        )
    return emit


def _image_to_video(node: ComfyNode, ctx: MapContext) -> Emit:
    wires = {"text_encoder": "clip", "vae": "vae"}
    wires |= {name: name for name in ("first_frame", "last_frame") if node.inputs.get(name) is not None}
    return _emit(node, "MiniMaxH3ImageToVideo", {}, ("positive", "latent"), **wires)  # prompt etc.: declared


def _sigma_shift(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "MiniMaxH3SigmaShift", {}, ("denoiser",), denoiser="model")  # shifts: declared


def _decode_audio(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "VAEDecodeAudio", {}, ("audio",), vae="vae", latent="samples")


def _attention_backend(node: ComfyNode, ctx: MapContext) -> PassThrough:
    backend = _get(node, "backend", _get(node, "widgets_values", ""))
    ctx.graph.note(
        node, f"ModelAttentionBackend {backend!r}: the model runs with this machine's attention kernel"
    )
    return PassThrough({0: "model"})


def _block_sparse_attention(node: ComfyNode, ctx: MapContext) -> PassThrough:
    ctx.graph.note(
        node,
        "BlockSparseAttention (video sparse attention) is not applied: the model runs dense attention here, "
        "which costs more compute and gives a picture close to, not equal to, ComfyUI's sparse run",
    )
    return PassThrough({0: "model"})


_MAX_PICTURES = 9  # our node's ref_image_1 .. ref_image_9 (MiniMax H3's limit)
_UNREAD_REFERENCES = ("ref_videos.", "ref_video_audios.", "ref_audios.")


def _number(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else 0


def _reference_to_video(node: ComfyNode, ctx: MapContext) -> Emit:
    wired = [k for k, v in node.inputs.items() if isinstance(v, LinkRef)]
    others = [k for k in wired if k.startswith(_UNREAD_REFERENCES)]
    if others:
        return unsupported_emit(
            node,
            f"MiniMax H3 reference to video with reference videos or sounds ({', '.join(sorted(others))}) does "
            "not run in Nodeloom yet; reference pictures (ref_images) do",
        )
    pictures = sorted((k for k in wired if k.startswith("ref_images.")), key=_number)
    if len(pictures) > _MAX_PICTURES:
        return unsupported_emit(node, f"{len(pictures)} reference pictures; MiniMax H3 takes at most 9")
    wires = {"text_encoder": "clip", "vae": "vae"}
    if isinstance(node.inputs.get("audio_vae"), LinkRef):
        wires["audio_vae"] = "audio_vae"
    emit = _emit(node, "MiniMaxH3ReferenceToVideo", {}, ("positive", "latent"), **wires)
    for i, name in enumerate(pictures):
        emit.inputs[f"ref_image_{i + 1}"] = node.inputs[name]
    return emit  # prompt, width, height, length, ref_image_size: declared


MINIMAX_MAPPERS: dict[str, Mapper] = {
    "MiniMaxH3ImageToVideo": _image_to_video,
    "MiniMaxH3SigmaShift": _sigma_shift,
    "VAEDecodeAudio": _decode_audio,
    "ModelAttentionBackend": _attention_backend,
    "BlockSparseAttention": _block_sparse_attention,
    "MiniMaxH3ReferenceToVideo": _reference_to_video,
    "EmptyLatentImage": _empty_latent_image,
}
