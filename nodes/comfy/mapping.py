"""The table from ComfyUI node classes to Nodeloom node types, one small function per class.

Lives here: `Emit`, `PassThrough`, `Constant`, `MapContext`, `MAPPERS`, `COMFY_TEXT_ENCODER_TYPES`,
`comfy_sampler_name`. Imports `nodes.comfy.graph` and `pipelines.diffusion.schedulers` (sampler names).

A param that declares its ComfyUI widget (`Param.comfy`) is copied by nodes/comfy/convert.py when its
mapper does not set it; a mapper lists a widget itself where it translates the value or falls back to
ComfyUI's own default when the widget is missing. A mapper turns one ComfyUI node into either one of our nodes (`Emit`: type, params, wired inputs and which
of our outputs stands for each ComfyUI output slot) or a pass-through (`PassThrough`: an output that is one
of its inputs, e.g. FluxGuidance, whose guidance value is carried to the sampler it reaches). A class with
no mapper becomes a placeholder node `ComfyUI.<class>` that the check refuses, naming it; never a silent
drop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.comfy.families import (
    denoiser_family,
    edit_family,
    family_from_name,
    graph_family_hint,
    text_encoder_family,
)
from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from pipelines.diffusion.schedulers import K_SCHEDULER_NAMES

PLACEHOLDER_PREFIX = "ComfyUI."

# ComfyUI's CLIP loader `type` -> our text-encoder family (TripleCLIPLoader has no type: SD3).
COMFY_TEXT_ENCODER_TYPES: dict[str, str] = {
    "stable_diffusion": "sd",
    "sd1": "sd",
    "sdxl": "sdxl",
    "sd3": "sd3",
    "flux": "flux",
    "pixart": "pixart_sigma",
    "lumina2": "zimage",  # ComfyUI runs Z-Image as a Lumina 2 variant
    "qwen_image": "qwenimage",
    "wan": "wan",
    "flux2": "flux2_klein",  # FLUX.2 either way: a Mistral file loads as [dev] (comfy_layouts.loaders)
    "minimax": "minimax",
    "krea2": "krea2",
    "flux3": "flux3",
}
# ComfyUI's UNETLoader weight_dtype -> our dtype choice (the rest load in the automatic dtype).
_WEIGHT_DTYPES = {"fp8_e4m3fn": "fp8_e4m3fn", "fp8_e4m3fn_fast": "fp8_e4m3fn", "fp8_e5m2": "fp8_e5m2"}


@dataclass
class Emit:
    type: str
    params: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)  # our port -> LinkRef (or a constant param)
    outputs: tuple[str | None, ...] = ()  # our output name per ComfyUI output slot (None: not offered)
    annotations: dict[int, dict[str, Any]] = field(default_factory=dict)  # per slot, for consumers
    reason: str | None = None  # a placeholder's: why this node is not mapped (shown by the check)


@dataclass
class PassThrough:
    inputs: dict[int, str]  # ComfyUI output slot -> the ComfyUI input it forwards
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass
class Constant:
    """A node resolved at import to constant outputs (ResolutionSelector): each consumer takes the value of
    the slot it reads as a param, and the node itself is not emitted."""

    values: dict[int, Any]


@dataclass(frozen=True)
class MapContext:
    graph: ComfyGraph
    # Guesses a model file's family ("sd", "sdxl", "sd3", "flux") from its header, when the models
    # library finds the name; None when it cannot.
    detect_family: Callable[[str], str | None] = lambda name: None


Mapper = Callable[[ComfyNode, MapContext], "Emit | PassThrough | Constant"]


def unsupported_emit(node: ComfyNode, reason: str) -> Emit:
    """The placeholder of a node this importer recognises but cannot map here, with why."""
    params = {k: v for k, v in node.inputs.items() if not isinstance(v, LinkRef)}
    wired = {k: v for k, v in node.inputs.items() if isinstance(v, LinkRef)}
    return Emit(f"{PLACEHOLDER_PREFIX}{node.class_type}", params, wired, (), reason=reason)


def _get(node: ComfyNode, name: str, default: Any = None) -> Any:
    return node.inputs.get(name, default)


def _wired(node: ComfyNode, **ports: str) -> dict[str, Any]:
    """Our port -> the ComfyUI input feeding it (links only; a missing input stays missing)."""
    return {ours: node.inputs[theirs] for ours, theirs in ports.items() if theirs in node.inputs}


def _split(node: ComfyNode, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Constants stay params; a widget fed by a wire (a LinkRef) becomes an input of that name."""
    constants = {k: v for k, v in params.items() if not isinstance(v, LinkRef) and v is not None}
    wired = {k: v for k, v in params.items() if isinstance(v, LinkRef)}
    return constants, wired


def _emit(
    node: ComfyNode,
    type_: str,
    params: dict[str, Any],
    outputs: tuple[str | None, ...],
    **ports: str,
) -> Emit:
    constants, wired = _split(node, params)
    return Emit(type_, constants, {**_wired(node, **ports), **wired}, outputs)


def comfy_sampler_name(name: Any, node: ComfyNode, graph: ComfyGraph) -> Any:
    """ComfyUI's sampler_name -> our k_* scheduler choice (the *_gpu variants run the same algorithm)."""
    if not isinstance(name, str):
        return name
    if name.endswith("_gpu") and f"k_{name.removesuffix('_gpu')}" in K_SCHEDULER_NAMES:
        graph.note(
            node,
            f"approximated: sampler {name!r} runs as {name.removesuffix('_gpu')!r} (noise drawn on the CPU)",
        )
        name = name.removesuffix("_gpu")
    if f"k_{name}" not in K_SCHEDULER_NAMES:
        graph.note(
            node, f"sampler {name!r} is not implemented here; choose one of {', '.join(K_SCHEDULER_NAMES)}"
        )
    return f"k_{name}"


def _model_name(name: Any) -> Any:
    return name


def _loader_family(node: ComfyNode, ctx: MapContext, name: Any) -> str:
    """From the file's header when the library has it, else from the name, else from the graph."""
    family = edit_family(ctx.detect_family(name) if isinstance(name, str) else None, ctx.graph)
    if family is not None:
        return family
    guess = family_from_name(name) or graph_family_hint(ctx.graph) or "sd"
    ctx.graph.note(
        node, f"{name!r} not found in the models library: family {guess!r} guessed from the workflow"
    )
    return guess


def _checkpoint(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LoadDiffusionModel", {}, ("denoiser", "text_encoder", "vae"))  # path: ckpt_name


def _unet(node: ComfyNode, ctx: MapContext) -> Emit:
    name, weight_dtype = _get(node, "unet_name"), _get(node, "weight_dtype", "default")
    dtype = _WEIGHT_DTYPES.get(weight_dtype, "auto") if isinstance(weight_dtype, str) else weight_dtype
    if weight_dtype not in (None, "default") and weight_dtype != dtype:
        ctx.graph.note(node, f"weight_dtype {weight_dtype!r} loads as dtype {dtype!r} here")
    family = _loader_family(node, ctx, name)
    params = {"path": _model_name(name), "family": family, "dtype": dtype}
    return _emit(node, "LoadDenoiser", params, ("denoiser",))


def _clip_loader(*names: str) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Emit:
        params: dict[str, Any] = {}
        for i, name in enumerate(names):
            params["path" if i == 0 else f"path_{i + 1}"] = _model_name(_get(node, name))
        type_ = _get(node, "type", "sd3" if len(names) == 3 else None)
        if isinstance(type_, str) and type_ not in COMFY_TEXT_ENCODER_TYPES:
            ctx.graph.note(
                node, f"type {type_!r} is not a family Nodeloom runs: family 'auto' (from the files)"
            )
        params["family"] = COMFY_TEXT_ENCODER_TYPES.get(type_, "auto") if isinstance(type_, str) else "auto"
        params["family"] = text_encoder_family(params["family"], ctx.graph, ctx.detect_family)
        return _emit(node, "LoadTextEncoder", params, ("text_encoder",))

    return mapper


def _vae(node: ComfyNode, ctx: MapContext) -> Emit:
    name = _get(node, "vae_name")
    family = denoiser_family(ctx.graph, ctx.detect_family)
    if family is None:
        family = _loader_family(node, ctx, name)
    else:
        ctx.graph.note(node, f"family {family!r}: the family of the denoiser it decodes for")
    return _emit(node, "LoadVAE", {"path": _model_name(name), "family": family}, ("vae",))


def _text_encode(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "TextEncode", {}, ("conditioning",), text_encoder="clip")  # text: declared


def _text_encode_flux(node: ComfyNode, ctx: MapContext) -> Emit:
    clip_l, t5 = _get(node, "clip_l", ""), _get(node, "t5xxl", "")
    if isinstance(clip_l, str) and isinstance(t5, str) and clip_l.strip() and clip_l.strip() != t5.strip():
        ctx.graph.note(
            node, "separate clip_l prompt not used: Nodeloom's Flux encoder takes one prompt (t5xxl's)"
        )
    emit = _emit(node, "TextEncode", {"text": t5}, ("conditioning",), text_encoder="clip")
    emit.annotations[0] = {"guidance": (_get(node, "guidance", 3.5), node.id)}
    return emit


def _clip_set_last_layer(node: ComfyNode, ctx: MapContext) -> Emit:
    # Our ClipSkip takes ComfyUI's stop_at_clip_layer as it is (declared): -1 the last layer, -2 the one before.
    return _emit(node, "ClipSkip", {}, ("text_encoder",), text_encoder="clip")


def _flux_guidance(node: ComfyNode, ctx: MapContext) -> PassThrough:
    return PassThrough({0: "conditioning"}, {"guidance": (_get(node, "guidance", 3.5), node.id)})


# ComfyUI's ModelSamplingDiscrete `sampling` -> our prediction type (lcm, x0, img_to_img: not here).
_PREDICTIONS = {"eps": "epsilon", "v_prediction": "v_prediction"}


def _model_sampling(node: ComfyNode, ctx: MapContext) -> Emit:
    """ModelSampling* -> our Model Sampling Shift (nodes/comfy/sampling_nodes.py): applied to the schedule."""
    if node.class_type == "ModelSamplingFlux":
        params = {
            "mode": "flux",
            "max_shift": _get(node, "max_shift", 1.15),
            "base_shift": _get(node, "base_shift", 0.5),
            "width": _get(node, "width", 1024),
            "height": _get(node, "height", 1024),
        }
    elif node.class_type == "ModelSamplingDiscrete":
        sampling = _get(node, "sampling", "eps")
        if isinstance(sampling, str) and sampling not in _PREDICTIONS:
            ctx.graph.note(node, f"sampling {sampling!r} is not applied here (eps or v_prediction are)")
        prediction = _PREDICTIONS.get(sampling, "keep") if isinstance(sampling, str) else "keep"
        params = {"mode": "discrete", "prediction": prediction, "zsnr": _get(node, "zsnr", False)}
    else:  # SD3 and AuraFlow: the same time shift (AuraFlow's default 1.73, SD3's 3.0)
        aura = node.class_type == "ModelSamplingAuraFlow"
        params = {"mode": "auraflow" if aura else "sd3", "shift": _get(node, "shift", 1.73 if aura else 3.0)}
    return _emit(node, "ModelSamplingShift", params, ("denoiser",), denoiser="model")


def _empty_latent(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {
        "width": _get(node, "width", 512),
        "height": _get(node, "height", 512),
        "batch": _get(node, "batch_size", 1),
    }
    return _emit(node, "EmptyLatent", params, ("latent",))


def _ksampler(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {
        "scheduler": comfy_sampler_name(_get(node, "sampler_name", "euler"), node, ctx.graph),
        "sigma_schedule": _get(node, "scheduler", "normal"),
        "steps": _get(node, "steps", 20),
        "cfg": _get(node, "cfg", 8.0),
        "seed": _get(node, "seed", 0),
        "denoise": _get(node, "denoise", 1.0),
    }
    return _emit(
        node,
        "Sampler",
        params,
        ("latent",),
        denoiser="model",
        positive="positive",
        negative="negative",
        latent="latent_image",
    )


def _enabled(value: Any) -> Any:
    return value == "enable" if isinstance(value, str) else value


def _ksampler_advanced(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {
        "add_noise": _enabled(_get(node, "add_noise", "enable")),
        "seed": _get(node, "noise_seed", 0),
        "steps": _get(node, "steps", 20),
        "cfg": _get(node, "cfg", 8.0),
        "scheduler": comfy_sampler_name(_get(node, "sampler_name", "euler"), node, ctx.graph),
        "sigma_schedule": _get(node, "scheduler", "normal"),
        "start_step": _get(node, "start_at_step", 0),
        "end_step": _get(node, "end_at_step", 10000),
        "leftover_noise": _enabled(_get(node, "return_with_leftover_noise", "disable")),
    }
    return _emit(
        node,
        "SamplerAdvanced",
        params,
        ("latent",),
        denoiser="model",
        positive="positive",
        negative="negative",
        latent="latent_image",
    )


def _vae_decode(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "VAEDecode", {}, ("image",), vae="vae", latent="samples")


def _vae_encode(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "VAEEncode", {}, ("latent",), vae="vae", image="pixels")


def _load_image(node: ComfyNode, ctx: MapContext) -> Emit:
    image = _get(node, "image", "")
    ctx.graph.note(
        node,
        f"image {image!r} is looked up in ComfyUI's input/ folder beside the models folders (--models-dir "
        "the ComfyUI install); set the path to use a picture elsewhere",
    )
    return _emit(node, "LoadImage", {"path": image}, ("image", "mask"))


def _save_image(node: ComfyNode, ctx: MapContext) -> Emit:
    prefix = _get(node, "filename_prefix", "ComfyUI")
    if isinstance(prefix, str):
        # ComfyUI allows sub-folders and %date% tokens; our prefix is a plain file name in the output folder.
        clean = re.sub(r"[^A-Za-z0-9._-]+", "_", prefix).strip("._") or "ComfyUI"
        if clean != prefix:
            ctx.graph.note(
                node, f"filename_prefix {prefix!r} becomes {clean!r} (a plain name in the output folder)"
            )
        prefix = clean
    return _emit(node, "SaveImage", {"prefix": prefix}, (), image="images")


def _preview_image(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "PreviewImage", {}, (), image="images")


# The scaling nodes' widgets (upscale_method, width, height, crop, scale_by) are the params' declared ComfyUI
# names (nodes/comfy/node_types.py); convert.py copies them, so these mappers name only the type and wires.
def _image_scale(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ImageScale", {}, ("image",), image="image")


def _image_scale_by(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ImageScaleBy", {}, ("image",), image="image")


def _latent_upscale(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LatentUpscale", {}, ("latent",), latent="samples")


def _latent_upscale_by(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LatentUpscaleBy", {}, ("latent",), latent="samples")


def _lora(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {
        "path": _model_name(_get(node, "lora_name")),
        "strength_model": _get(node, "strength_model", 1.0),
    }
    if node.class_type == "LoraLoader":
        params["strength_text"] = _get(node, "strength_clip", 1.0)
        return _emit(
            node, "LoadLoRA", params, ("denoiser", "text_encoder"), denoiser="model", text_encoder="clip"
        )
    return _emit(node, "LoadLoRA", params, ("denoiser",), denoiser="model")


def _controlnet_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    name = _get(node, "control_net_name")
    ctx.graph.note(
        node,
        f"ControlNet {name!r}: Nodeloom loads diffusers-format ControlNets (config.json next to the weights)",
    )
    return _emit(node, "LoadControlNet", {"path": _model_name(name)}, ("controlnet",))


def _controlnet_apply(node: ComfyNode, ctx: MapContext) -> Emit:
    params = {
        "strength": _get(node, "strength", 1.0),
        "start_percent": _get(node, "start_percent", 0.0),
        "end_percent": _get(node, "end_percent", 1.0),
    }
    if node.class_type == "ControlNetApply":
        return _emit(
            node,
            "ApplyControlNet",
            params,
            ("positive",),
            positive="conditioning",
            controlnet="control_net",
            image="image",
        )
    # ControlNetApplyAdvanced's optional vae (for ControlNets that take latents) is not needed here.
    return _emit(
        node,
        "ApplyControlNet",
        params,
        ("positive", "negative"),
        positive="positive",
        negative="negative",
        controlnet="control_net",
        image="image",
    )


def _upscale_model_loader(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "LoadUpscaleModel", {}, ("upscale_model",))  # path: model_name


def _upscale_with_model(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "UpscaleImage", {}, ("image",), upscale_model="upscale_model", image="image")


def _latent_noise_mask(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "SetLatentNoiseMask", {}, ("latent",), latent="samples", mask="mask")


def _inpaint_conditioning(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(
        node,
        "InpaintConditioning",
        {},  # noise_mask: declared
        ("positive", "negative", "latent"),
        positive="positive",
        negative="negative",
        vae="vae",
        image="pixels",
        mask="mask",
    )


MAPPERS: dict[str, Mapper] = {
    "CheckpointLoaderSimple": _checkpoint,
    "UNETLoader": _unet,
    "CLIPLoader": _clip_loader("clip_name"),
    "DualCLIPLoader": _clip_loader("clip_name1", "clip_name2"),
    "TripleCLIPLoader": _clip_loader("clip_name1", "clip_name2", "clip_name3"),
    "VAELoader": _vae,
    "CLIPTextEncode": _text_encode,
    "CLIPTextEncodeFlux": _text_encode_flux,
    "CLIPSetLastLayer": _clip_set_last_layer,
    "ConditioningZeroOut": lambda node, ctx: _emit(
        node, "ZeroConditioning", {}, ("conditioning",), conditioning="conditioning"
    ),
    "FluxGuidance": _flux_guidance,
    "ModelSamplingSD3": _model_sampling,
    "ModelSamplingFlux": _model_sampling,
    "ModelSamplingAuraFlow": _model_sampling,
    "ModelSamplingDiscrete": _model_sampling,
    "EmptyLatentImage": _empty_latent,
    "EmptySD3LatentImage": _empty_latent,
    "EmptyFlux2LatentImage": _empty_latent,  # channels and scale from the model it is sampled with
    "KSampler": _ksampler,
    "KSamplerAdvanced": _ksampler_advanced,
    "VAEDecode": _vae_decode,
    "VAEEncode": _vae_encode,
    "LoadImage": _load_image,
    "SaveImage": _save_image,
    "PreviewImage": _preview_image,
    "ImageScale": _image_scale,
    "ImageScaleBy": _image_scale_by,
    "LatentUpscale": _latent_upscale,
    "LatentUpscaleBy": _latent_upscale_by,
    "LoraLoader": _lora,
    "LoraLoaderModelOnly": _lora,
    "ControlNetLoader": _controlnet_loader,
    "ControlNetApply": _controlnet_apply,
    "ControlNetApplyAdvanced": _controlnet_apply,
    "UpscaleModelLoader": _upscale_model_loader,
    "ImageUpscaleWithModel": _upscale_with_model,
    "SetLatentNoiseMask": _latent_noise_mask,
    "InpaintModelConditioning": _inpaint_conditioning,
}
