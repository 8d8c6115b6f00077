"""ComfyUI's MiniMax H3 nodes onto ours.

Lives here: `MINIMAX_MAPPERS`. Imports `nodes.comfy.graph` and `nodes.comfy.mapping` (Emit, PassThrough, the
helpers).

- MiniMaxH3ImageToVideo -> our MiniMax H3 Image to Video (nodes/minimax.py): clip -> text_encoder, the
  optional first/last frames, prompt/width/height/length; outputs positive and the latent.
- MiniMaxH3SigmaShift -> MiniMax H3 Sigma Shift (the two schedules' shifts).
- VAEDecodeAudio -> VAE Decode Audio: the sound track of the sampled latent. ComfyUI wires the audio VAE's
  file here; ours decodes with the audio VAE of the model folder the VAE came from.
- ModelAttentionBackend -> passes the model through (an attention kernel choice: the math is the same),
  noted.
- MiniMaxH3ReferenceToVideo is not mapped: the ref2va task (reference pictures, videos and sounds, the
  `transformer_ref` checkpoint) does not run here yet, and the check says so.
"""

from __future__ import annotations

from nodes.comfy.graph import ComfyNode
from nodes.comfy.mapping import Emit, MapContext, Mapper, PassThrough, _emit, _get, unsupported_emit


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


def _reference_to_video(node: ComfyNode, ctx: MapContext) -> Emit:
    return unsupported_emit(
        node,
        "MiniMax H3 reference-to-video (ref2va: reference pictures, videos and sounds, the transformer_ref "
        "checkpoint) does not run in Nodeloom yet; text and first/last-frame to video do (MiniMaxH3ImageToVideo)",
    )


MINIMAX_MAPPERS: dict[str, Mapper] = {
    "MiniMaxH3ImageToVideo": _image_to_video,
    "MiniMaxH3SigmaShift": _sigma_shift,
    "VAEDecodeAudio": _decode_audio,
    "ModelAttentionBackend": _attention_backend,
    "BlockSparseAttention": _block_sparse_attention,
    "MiniMaxH3ReferenceToVideo": _reference_to_video,
}
