"""ComfyUI's LTX-2 nodes mapped onto Nodeloom's (nodes/ltx2_latents.py, nodes/ltx2_models.py, the loaders).

Lives here: `LTX2_MAPPERS`, `is_ltx2_graph`, `ltx2_sampler_name`. Imports `nodes.comfy.graph`,
`nodes.comfy.mapping` (Emit, PassThrough and helpers), `nodes.comfy.mapping_text` (TextGenerate's mapper),
`nodes.comfy.mapping_media` (VAEDecodeTiled's, for other families), `nodes.comfy.mapping_minimax` (which graphs
are MiniMax H3's) and `pipelines.diffusion.family_detect` (the LTX-2 file-name markers, from its registry entry).

What each does here:
- loaders: the checkpoint's audio VAE (LTXVAudioVAELoader) and the Gemma + connectors text encoder
  (LTXAVTextEncoderLoader, CLIPLoader type "ltxv" in an LTX-2 graph) are Load VAE File / Load Text Encoder File
  with family ltx2; LatentUpscaleModelLoader is Load Latent Upsampler.
- latents: EmptyLTXVLatentVideo -> ours (sized by the graph's video VAE, at the frame rate of its
  LTXVConditioning, which ComfyUI gives the transformer there and ours reads from the latent; its sound latent,
  made when the VAE has one, is replaced by LTXVConcatAVLatent's);
  LTXVEmptyLatentAudio, LTXVConcatAVLatent, LTXVSeparateAVLatent, LTXVAudioVAEDecode, LTXVPreprocess,
  LTXVImgToVideoInplace, LTXVLatentUpsampler -> ours of those names; VAEDecode(Tiled) of an LTX-2 latent ->
  LTXV Decode Frames.
- LTXVConditioning passes its prompts through (the frame rate is the latent's here); LTXVCropGuides passes all
  three through when the graph adds no keyframe guides (LTXVAddGuide), which is what it would crop.
- guiders: in an LTX-2 graph CFGGuider and LTXVDualCFGGuider are LTX-2 Guidance nodes (ComfyUI's guidance:
  CFG on video and sound, no spatio-temporal guidance, no modality isolation, no rescale) whose cfg the sampler
  takes (mapping_sigmas).
- TextGenerateLTX2Prompt is TextGenerate (LLM Generate), without LTX-2's prompt-enhancer instructions.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.mapping import (
    MAPPERS,
    Emit,
    MapContext,
    Mapper,
    PassThrough,
    _emit,
    _get,
    comfy_sampler_name,
    unsupported_emit,
)
from nodes.comfy.mapping_media import MEDIA_MAPPERS
from nodes.comfy.mapping_minimax import is_minimax_graph
from nodes.comfy.mapping_text import TEXT_MAPPERS

# Classes only LTX-2 (not LTX-Video 0.9) graphs hold: the audio-video latent and its loaders.
_LTX2_ONLY = frozenset(
    {
        "LTXVConcatAVLatent",
        "LTXVSeparateAVLatent",
        "LTXVEmptyLatentAudio",
        "LTXVAudioVAEDecode",
        "LTXVAudioVAELoader",
        "LTXAVTextEncoderLoader",
    }
)
_VAE_USERS = ("LTXVImgToVideoInplace", "LTXVLatentUpsampler", "VAEDecodeTiled", "VAEDecode", "LTXVAddGuide")
_LTXV_DEFAULT_FPS = 25.0  # LTXVConditioning's default frame_rate


def is_ltx2_graph(graph: ComfyGraph) -> bool:
    """Whether the workflow runs an LTX-2 model (its audio-video nodes are LTX-2's only, but for Separate AV
    Latent, which MiniMax H3's still template also uses: "any AV model, e.g. LTXV or MiniMax H3")."""
    if is_minimax_graph(graph):
        return False
    return any(node.class_type in _LTX2_ONLY for node in graph.nodes.values())


def ltx2_sampler_name(name: Any, node: ComfyNode, ctx: MapContext) -> Any:
    """KSamplerSelect's name -> ours; LTX-2's loop is Euler, so euler_ancestral runs as euler (said)."""
    if is_ltx2_graph(ctx.graph) and name == "euler_ancestral":
        ctx.graph.note(
            node, "approximated: euler_ancestral runs as euler here (no noise added back per step)"
        )
        name = "euler"
    return comfy_sampler_name(name, node, ctx.graph)


def _first_link(graph: ComfyGraph, classes: tuple[str, ...], name: str) -> LinkRef | None:
    for node in graph.nodes.values():
        if node.class_type in classes and isinstance(node.inputs.get(name), LinkRef):
            return node.inputs[name]
    return None


def _frame_rate(graph: ComfyGraph) -> Any:
    """The rate the graph's LTXVConditioning gives the transformer (a constant, or the wire feeding it)."""
    for node in graph.nodes.values():
        if node.class_type == "LTXVConditioning":
            return node.inputs.get("frame_rate", _LTXV_DEFAULT_FPS)
    return _LTXV_DEFAULT_FPS


def _video_vae_loader(graph: ComfyGraph) -> LinkRef | None:
    """The checkpoint's VAE output, else a VAE file not named as the audio one."""
    for node in graph.nodes.values():
        if node.class_type == "CheckpointLoaderSimple":
            return LinkRef(node.id, 2)
    for node in graph.nodes.values():
        if node.class_type == "VAELoader" and "audio" not in str(node.inputs.get("vae_name", "")).lower():
            return LinkRef(node.id, 0)
    return None


def _empty_video(node: ComfyNode, ctx: MapContext) -> Emit:
    if _get(node, "batch_size", 1) not in (1, None):
        ctx.graph.note(node, "batch_size above 1: LTX-2 samples one video at a time here (1 is made)")
    emit = _emit(node, "EmptyLTXVLatentVideo", {"fps": _frame_rate(ctx.graph)}, ("latent",))
    vae = _first_link(ctx.graph, _VAE_USERS, "vae") or _video_vae_loader(ctx.graph)
    if vae is not None:
        emit.inputs["vae"] = vae
    ctx.graph.note(node, "sized by the graph's video VAE, at the frame rate of its LTXVConditioning")
    return emit


def _empty_audio(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LTXVEmptyLatentAudio", {}, ("latent",), vae="audio_vae")  # frames, fps: declared


def _audio_vae_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    name = _get(node, "ckpt_name")
    return _emit(node, "LoadVAE", {"path": name, "family": "ltx2"}, ("vae",))


def _text_encoder_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {"path": _get(node, "text_encoder"), "path_2": _get(node, "ckpt_name"), "family": "ltx2"}
    ctx.graph.note(node, "Gemma from its file, the text connectors from the checkpoint (path_2)")
    return _emit(node, "LoadTextEncoder", params, ("text_encoder",))


def _clip_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    if _get(node, "type") == "ltxv" and is_ltx2_graph(ctx.graph):
        return _emit(
            node, "LoadTextEncoder", {"path": _get(node, "clip_name"), "family": "ltx2"}, ("text_encoder",)
        )
    return MAPPERS["CLIPLoader"](node, ctx)


def _conditioning(node: ComfyNode, ctx: MapContext) -> PassThrough:
    ctx.graph.note(
        node, "the frame rate goes to the transformer from the latent here (its Empty LTXV Latent Video)"
    )
    return PassThrough({0: "positive", 1: "negative"})


def _crop_guides(node: ComfyNode, ctx: MapContext) -> PassThrough | Emit:
    if any(n.class_type == "LTXVAddGuide" for n in ctx.graph.nodes.values()):
        return unsupported_emit(node, "crops LTXVAddGuide's keyframe guides, which are not mapped here")
    return PassThrough({0: "positive", 1: "negative", 2: "latent"})


def _guider(node: ComfyNode, ctx: MapContext) -> Emit | PassThrough:
    if not is_ltx2_graph(ctx.graph):  # folded into its sampler (mapping_sampling)
        return PassThrough({})
    cfg = _get(node, "cfg", 1.0)
    audio_cfg = _get(node, "audio_cfg", cfg) if node.class_type == "LTXVDualCFGGuider" else cfg
    params = {
        "audio_cfg": audio_cfg,
        "stg_scale": 0.0,
        "audio_stg_scale": 0.0,
        "modality_scale": 1.0,
        "audio_modality_scale": 1.0,
        "rescale": 0.0,
        "audio_rescale": 0.0,
    }
    ctx.graph.note(
        node, f"ComfyUI's guidance: cfg {cfg} on video (the sampler's), {audio_cfg} on sound, no other term"
    )
    return _emit(node, "LTX2Guidance", params, ("denoiser",), denoiser="model")


def _text_generate(node: ComfyNode, ctx: MapContext) -> Emit:
    ctx.graph.note(
        node, "approximated: LTX-2's prompt-enhancer instructions are not added (a plain LLM Generate)"
    )
    return TEXT_MAPPERS["TextGenerate"](node, ctx)


def _vae_decode(node: ComfyNode, ctx: MapContext) -> Emit:
    if not is_ltx2_graph(ctx.graph):
        return (MEDIA_MAPPERS if node.class_type == "VAEDecodeTiled" else MAPPERS)[node.class_type](node, ctx)
    if node.class_type == "VAEDecodeTiled":
        ctx.graph.note(node, "approximated: decoded whole (LTX-2's decode has no tiling plan here yet)")
    return _emit(node, "LTXVDecodeFrames", {}, ("image",), vae="vae", latent="samples")


LTX2_MAPPERS: dict[str, Mapper] = {
    "EmptyLTXVLatentVideo": _empty_video,
    "LTXVEmptyLatentAudio": _empty_audio,
    "LTXVConcatAVLatent": lambda node, ctx: _emit(
        node, "LTXVConcatAVLatent", {}, ("latent",), video_latent="video_latent", audio_latent="audio_latent"
    ),
    "LTXVSeparateAVLatent": lambda node, ctx: _emit(
        node, "LTXVSeparateAVLatent", {}, ("video_latent", "audio_latent"), av_latent="av_latent"
    ),
    "LTXVAudioVAEDecode": lambda node, ctx: _emit(
        node, "LTXVAudioVAEDecode", {}, ("audio",), vae="audio_vae", latent="samples"
    ),
    "LTXVPreprocess": lambda node, ctx: _emit(node, "LTXVPreprocess", {}, ("image",), image="image"),
    "LTXVImgToVideoInplace": lambda node, ctx: _emit(
        node, "LTXVImgToVideoInplace", {}, ("latent",), vae="vae", image="image", latent="latent"
    ),
    "LTXVLatentUpsampler": lambda node, ctx: _emit(
        node,
        "LTXVLatentUpsampler",
        {},
        ("latent",),
        latent="samples",
        upscale_model="upscale_model",
        vae="vae",
    ),
    "LatentUpscaleModelLoader": lambda node, ctx: _emit(node, "LoadLatentUpsampler", {}, ("upscale_model",)),
    "LTXVAudioVAELoader": _audio_vae_loader,
    "LTXAVTextEncoderLoader": _text_encoder_loader,
    "CLIPLoader": _clip_loader,
    "LTXVConditioning": _conditioning,
    "LTXVCropGuides": _crop_guides,
    "CFGGuider": _guider,
    "LTXVDualCFGGuider": _guider,
    "TextGenerateLTX2Prompt": _text_generate,
    "VAEDecode": _vae_decode,
    "VAEDecodeTiled": _vae_decode,
    # A core node the LTX-2 text-to-video templates use (a picture for a bypassed in-place frame).
    "EmptyImage": lambda node, ctx: _emit(node, "EmptyImage", {}, ("image",)),  # widgets: declared
}
