"""A Nodeloom workflow -> ComfyUI API format (the `prompt` a ComfyUI server queues), for graphs made only
of node types that have a ComfyUI counterpart.

Lives here: `ExportError`, `export_api`, `comfy_ids`, `EXPORTERS`. Imports `nodes.workflow`, `nodes.registry`, `nodes.modes`, `nodes.model_names`,
`nodes.comfy.mapping` (the text-encoder family names), `nodes.comfy.export_ltx2` (the LTX-2 / SIGMAS types), `nodes.comfy.export_cfg` (ComfyUI's cfg, CFGNorm).

Widget names come from the node types' declarations (`Param.comfy`, the one place they are written); this
table adds what has no 1:1 widget: the counterpart class, its wired inputs and output slots, and converters
for values that need translating (sampler names, enable/disable). A node imported from ComfyUI gets its
ComfyUI id back (`meta.comfyui.ids`); the others are numbered "1", "2", ... in the workflow's order, skipping
kept ids; each node's `_meta.title` keeps our id.
A diffusers scheduler has no exact ComfyUI twin: the nearest sampler/scheduler pair is written and the
node is named in `ExportError`-free notes; a node type with no counterpart is an `ExportError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodes.comfy.export_cfg import add_cfg_norms, comfy_cfg_offset
from nodes.comfy.export_ltx2 import fold_custom_samplers, ltx2_exporters
from nodes.comfy.mapping import COMFY_TEXT_ENCODER_TYPES
from nodes.image_batch import MAX_BATCH_INPUTS
from nodes.model_names import COMFY_META_KEY
from nodes.modes import without_reroutes
from nodes.registry import NodeRegistry
from nodes.workflow import NodeInstance, Workflow


class ExportError(ValueError):
    pass


@dataclass(frozen=True)
class _Out:
    class_type: str
    inputs: dict[str, str]  # ComfyUI input -> our input port
    params: dict[str, str]  # ComfyUI widget -> our param
    outputs: dict[str, int]  # our output -> ComfyUI slot
    fixed: tuple[tuple[str, Any], ...] = ()
    # Our inputs ComfyUI's node does without (an empty latent reads its channels from a wired model).
    drop: frozenset[str] = frozenset()
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # A function exporter's class that still takes the params' declared ComfyUI widgets (the KSampler).
    declared_widgets: bool = False


_NEAREST_K = {
    "euler": "euler",
    "euler_ancestral": "euler_ancestral",
    "dpmpp_2m": "dpmpp_2m",
    "ddim": "ddim",
    "unipc": "uni_pc",
}


def _sampler_widgets(params: dict[str, Any]) -> dict[str, Any]:
    scheduler = str(params.get("scheduler", "k_euler"))
    if scheduler.startswith("k_"):
        return {
            "sampler_name": scheduler.removeprefix("k_"),
            "scheduler": params.get("sigma_schedule", "normal"),
        }
    return {"sampler_name": _NEAREST_K.get(scheduler, "euler"), "scheduler": "normal"}


def _sampler_advanced(p: dict[str, Any]) -> dict[str, Any]:
    return {
        **_sampler_widgets(p),
        "add_noise": "enable" if p["add_noise"] else "disable",
        "return_with_leftover_noise": "enable" if p["leftover_noise"] else "disable",
    }


def _weight_dtype(p: dict[str, Any]) -> dict[str, Any]:
    dtype = p.get("dtype", "auto")
    return {
        "unet_name": p.get("path"),
        "weight_dtype": dtype if dtype in ("fp8_e4m3fn", "fp8_e5m2") else "default",
    }


_CLIP_TYPES = {ours: theirs for theirs, ours in reversed(COMFY_TEXT_ENCODER_TYPES.items())}
_CLIP_LOADERS = (
    ("CLIPLoader", ("clip_name",)),
    ("DualCLIPLoader", ("clip_name1", "clip_name2")),
    ("TripleCLIPLoader", ("clip_name1", "clip_name2", "clip_name3")),
)


def _text_encoder_loader(node: NodeInstance) -> _Out:
    """One, two or three files: CLIPLoader, DualCLIPLoader or TripleCLIPLoader (its files in order)."""
    paths = [p for p in ("path", "path_2", "path_3") if node.params.get(p) or p in node.inputs]
    class_type, names = _CLIP_LOADERS[max(0, min(len(paths), 3) - 1)]
    family = node.params.get("family", "auto")
    fixed: tuple[tuple[str, Any], ...] = ()
    if class_type != "TripleCLIPLoader":
        t5 = any("t5" in str(node.params.get(p, "")).lower() for p in paths)
        default = "stable_diffusion" if class_type == "CLIPLoader" else "flux" if t5 else "sdxl"
        fixed = (("type", _CLIP_TYPES.get(family, default)),)
    return _Out(class_type, {}, dict(zip(names, paths, strict=False)), {"text_encoder": 0}, fixed)


def _lora(node: NodeInstance) -> _Out:
    if "text_encoder" in node.inputs:
        return _Out(
            "LoraLoader",
            {"model": "denoiser", "clip": "text_encoder"},
            {"lora_name": "path", "strength_model": "strength_model", "strength_clip": "strength_text"},
            {"denoiser": 0, "text_encoder": 1},
        )
    return _Out(
        "LoraLoaderModelOnly",
        {"model": "denoiser"},
        {"lora_name": "path", "strength_model": "strength_model"},
        {"denoiser": 0},
    )


def _apply_controlnet(node: NodeInstance) -> _Out:
    params = {"strength": "strength", "start_percent": "start_percent", "end_percent": "end_percent"}
    inputs = {"control_net": "controlnet", "image": "image"}
    if (
        "negative" in node.inputs
        or node.params.get("start_percent", 0.0) != 0.0
        or (node.params.get("end_percent", 1.0) != 1.0)
    ):
        inputs |= {"positive": "positive", "negative": "negative"}
        return _Out("ControlNetApplyAdvanced", inputs, params, {"positive": 0, "negative": 1})
    return _Out(
        "ControlNetApply", inputs | {"conditioning": "positive"}, {"strength": "strength"}, {"positive": 0}
    )


# Our video formats -> ComfyUI SaveVideo's `format`; webp and png frames have no SaveVideo counterpart.
_COMFY_VIDEO_FORMATS = {"mp4": "mp4", "webm": "webm"}


def _save_video(p: dict[str, Any]) -> dict[str, Any]:
    fmt = p.get("format", "mp4")
    if fmt not in _COMFY_VIDEO_FORMATS:
        raise ExportError(f"SaveVideo format {fmt!r} has no ComfyUI SaveVideo counterpart (mp4, webm)")
    return {"format": _COMFY_VIDEO_FORMATS[fmt], "codec": "auto"}


def _vae_decode_tiled(p: dict[str, Any]) -> dict[str, Any]:
    # Our tile size 0 means "the largest that fits"; ComfyUI needs a number: its default, 512.
    return {"tile_size": p.get("tile_size") or 512, "overlap": 64, "temporal_size": 64, "temporal_overlap": 8}


_MODEL_SAMPLING = {"sd3": "ModelSamplingSD3", "auraflow": "ModelSamplingAuraFlow"}


def _model_sampling(node: NodeInstance) -> _Out:
    """Our Model Sampling Shift -> the ComfyUI class its mode names, with that class's widgets."""
    mode, model, out = node.params.get("mode", "sd3"), {"model": "denoiser"}, {"denoiser": 0}
    if mode == "flux":
        widgets = {w: w for w in ("max_shift", "base_shift", "width", "height")}
        return _Out("ModelSamplingFlux", model, widgets, out)
    if mode == "discrete":
        sampling = "v_prediction" if node.params.get("prediction") == "v_prediction" else "eps"
        return _Out("ModelSamplingDiscrete", model, {"zsnr": "zsnr"}, out, (("sampling", sampling),))
    return _Out(_MODEL_SAMPLING.get(mode, "ModelSamplingSD3"), model, {"shift": "shift"}, out)


def _to_side(p: dict[str, Any]) -> dict[str, Any]:
    side = "longer" if p.get("side", "longer") == "longer" else "shorter"
    return {
        "resize_type": f"scale {side} dimension",
        f"resize_type.{side}_size": p.get("size"),
        "scale_method": p.get("method", "lanczos"),
    }


def _text_generate(p: dict[str, Any]) -> dict[str, Any]:
    """LLM Generate -> TextGenerate's widgets; its sampling options are a dynamic combo (`sampling_mode.*`)."""
    widgets: dict[str, Any] = {
        "max_length": p.get("max_new_tokens", 512),
        "thinking": False,
        "use_default_template": bool(p.get("chat", True)),
    }
    if p.get("sampling") != "sample":
        return widgets | {"sampling_mode": "off"}
    options = {name: p.get(name) for name in ("temperature", "top_k", "top_p", "repetition_penalty", "seed")}
    options |= {"min_p": p.get("min_p", 0.0), "presence_penalty": 0.0}  # ours applies no presence penalty
    return widgets | {"sampling_mode": "on"} | {f"sampling_mode.{k}": v for k, v in options.items()}


EXPORTERS: dict[str, _Out | Callable[[NodeInstance], _Out]] = {
    "LoadDiffusionModel": _Out(
        "CheckpointLoaderSimple", {}, {}, {"denoiser": 0, "text_encoder": 1, "vae": 2}
    ),
    "LoadDenoiser": _Out("UNETLoader", {}, {"unet_name": "path"}, {"denoiser": 0}, convert=_weight_dtype),
    "LoadTextEncoder": _text_encoder_loader,
    "LoadLoRA": _lora,
    "ClipSkip": _Out("CLIPSetLastLayer", {"clip": "text_encoder"}, {}, {"text_encoder": 0}),
    "LoadControlNet": _Out("ControlNetLoader", {}, {}, {"controlnet": 0}),
    "ApplyControlNet": _apply_controlnet,
    "LoadUpscaleModel": _Out("UpscaleModelLoader", {}, {}, {"upscale_model": 0}),
    "UpscaleImage": _Out(
        "ImageUpscaleWithModel", {"upscale_model": "upscale_model", "image": "image"}, {}, {"image": 0}
    ),
    "SetLatentNoiseMask": _Out(
        "SetLatentNoiseMask", {"samples": "latent", "mask": "mask"}, {}, {"latent": 0}
    ),
    "InpaintConditioning": _Out(
        "InpaintModelConditioning",
        {"positive": "positive", "negative": "negative", "vae": "vae", "pixels": "image", "mask": "mask"},
        {},
        {"positive": 0, "negative": 1, "latent": 2},
    ),
    "LoadVAE": _Out("VAELoader", {}, {}, {"vae": 0}),
    "TextEncode": _Out("CLIPTextEncode", {"clip": "text_encoder"}, {}, {"conditioning": 0}),
    "ZeroConditioning": _Out(
        "ConditioningZeroOut", {"conditioning": "conditioning"}, {}, {"conditioning": 0}
    ),
    "EmptyLatent": _Out("EmptyLatentImage", {}, {}, {"latent": 0}, drop=frozenset({"denoiser", "vae"})),
    "Sampler": _Out(
        "KSampler",
        {"model": "denoiser", "positive": "positive", "negative": "negative", "latent_image": "latent"},
        {},
        {"latent": 0},
        convert=_sampler_widgets,
    ),
    "SamplerAdvanced": _Out(
        "KSamplerAdvanced",
        {"model": "denoiser", "positive": "positive", "negative": "negative", "latent_image": "latent"},
        {},
        {"latent": 0},
        convert=_sampler_advanced,
    ),
    "VAEDecode": _Out("VAEDecode", {"samples": "latent", "vae": "vae"}, {}, {"image": 0}),
    "VAEEncode": _Out("VAEEncode", {"pixels": "image", "vae": "vae"}, {}, {"latent": 0}),
    "LoadImage": _Out("LoadImage", {}, {}, {"image": 0, "mask": 1}),
    "SaveImage": _Out("SaveImage", {"images": "image"}, {}, {}),
    "PreviewImage": _Out("PreviewImage", {"images": "image"}, {}, {}),
    "ImageScale": _Out("ImageScale", {"image": "image"}, {}, {"image": 0}),
    "ImageScaleBy": _Out("ImageScaleBy", {"image": "image"}, {}, {"image": 0}),
    "LatentUpscale": _Out("LatentUpscale", {"samples": "latent"}, {}, {"latent": 0}),
    "LatentUpscaleBy": _Out("LatentUpscaleBy", {"samples": "latent"}, {}, {"latent": 0}),
    # Our primitives become ComfyUI's core primitive nodes (one output, a "value" widget).
    "Int": _Out("PrimitiveInt", {}, {}, {"value": 0}),
    "Float": _Out("PrimitiveFloat", {}, {}, {"value": 0}),
    "Bool": _Out("PrimitiveBoolean", {}, {}, {"value": 0}),
    "Seed": _Out("PrimitiveInt", {}, {}, {"seed": 0}),
    "Text": _Out("PrimitiveStringMultiline", {}, {}, {"text": 0}),
    # ComfyUI's video and newer core nodes (nodes/comfy/mapping_media.py imports them).
    "CreateVideo": _Out("CreateVideo", {"images": "frames", "audio": "audio"}, {"fps": "fps"}, {"video": 0}),
    "SaveVideo": _Out("SaveVideo", {"video": "video"}, {}, {}, convert=_save_video),
    "LoadVideo": _Out("LoadVideo", {}, {}, {"video": 0}),
    "VideoToFrames": _Out("GetVideoComponents", {"video": "video"}, {}, {"frames": 0, "audio": 1, "fps": 2}),
    "ImageScaleToTotalPixels": _Out("ImageScaleToTotalPixels", {"image": "image"}, {}, {"image": 0}),
    "ImageScaleToSide": _Out("ResizeImageMaskNode", {"input": "image"}, {}, {"image": 0}, convert=_to_side),
    "VAEDecodeTiled": _Out(
        "VAEDecodeTiled", {"samples": "latent", "vae": "vae"}, {}, {"image": 0}, convert=_vae_decode_tiled
    ),
    "ShowText": _Out("PreviewAny", {"source": "text"}, {}, {}),
    "TextEncodeQwenImage21": _Out(
        "TextEncodeQwenImage21",
        {"clip": "text_encoder", "vae": "vae", **{f"images.image_{i}": f"image{i}" for i in (1, 2, 3)}},
        {},
        {"positive": 0, "negative": 1, "latent": 2},
    ),
    "ModelSamplingShift": _model_sampling,
    "StringConcatenate": _Out("StringConcatenate", {}, {}, {"text": 0}),
    "StringReplace": _Out("StringReplace", {}, {}, {"text": 0}),
    "ReferenceLatent": _Out(
        "ReferenceLatent", {"conditioning": "conditioning", "latent": "latent"}, {}, {"conditioning": 0}
    ),
    "ReferenceLatentMethod": _Out(
        "FluxKontextMultiReferenceLatentMethod", {"conditioning": "conditioning"}, {}, {"conditioning": 0}
    ),
    "EmptyVideoLatent": _Out(
        "EmptyHunyuanLatentVideo",
        {},
        {"width": "width", "height": "height", "length": "frames"},
        {"latent": 0},
        fixed=(("batch_size", 1),),
        drop=frozenset({"vae", "denoiser"}),
    ),
    "GetImageSize": _Out("GetImageSize", {"image": "image"}, {}, {"width": 0, "height": 1, "batch_size": 2}),
    "CannyEdgesComfy": _Out("Canny", {"image": "image"}, {}, {"image": 0}),
    "MathExpression": _Out(
        "ComfyMathExpression",
        {f"values.{n}": n for n in "abcd"},
        {},
        {"float": 0, "int": 1, "bool": 2},
    ),
    "LLMGenerate": _Out(
        "TextGenerate",
        {"clip": "llm", "image": "image"},
        {"prompt": "prompt"},
        {"text": 0},
        convert=_text_generate,
    ),
    # Picture batches (nodes/comfy/mapping_batch.py).
    "BatchImages": _Out(
        "BatchImagesNode",
        {f"images.image{i}": f"image{i}" for i in range(MAX_BATCH_INPUTS)},
        {},
        {"image": 0},
    ),
    "ImageFromBatch": _Out("ImageFromBatch", {"image": "image"}, {}, {"image": 0}),
    # MiniMax H3 (nodes/comfy/mapping_minimax.py): prompt and sizes are declared widgets.
    "MiniMaxH3ImageToVideo": _Out(
        "MiniMaxH3ImageToVideo",
        {"clip": "text_encoder", "vae": "vae", "first_frame": "first_frame", "last_frame": "last_frame"},
        {},
        {"positive": 0, "latent": 1},
        drop=frozenset({"denoiser"}),
    ),
    "MiniMaxH3ReferenceToVideo": _Out(
        "MiniMaxH3ReferenceToVideo",
        {
            "clip": "text_encoder",
            "vae": "vae",
            "audio_vae": "audio_vae",
            **{f"ref_images.ref_image_{i - 1}": f"ref_image_{i}" for i in range(1, 10)},
        },
        {},
        {"positive": 0, "latent": 1},
        drop=frozenset({"denoiser"}),
    ),
    "MiniMaxH3SigmaShift": _Out("MiniMaxH3SigmaShift", {"model": "denoiser"}, {}, {"denoiser": 0}),
    "VAEDecodeAudio": _Out("VAEDecodeAudio", {"samples": "latent", "vae": "vae"}, {}, {"audio": 0}),
    # Wan (nodes/comfy/mapping_wan.py): the same widgets and inputs.
    "WanImageToVideo": _Out(
        "WanImageToVideo",
        {
            "positive": "positive",
            "negative": "negative",
            "vae": "vae",
            "start_image": "start_image",
            "clip_vision_output": "clip_vision_output",
        },
        {},
        {"positive": 0, "negative": 1, "latent": 2},
    ),
    "WanFirstLastFrameToVideo": _Out(
        "WanFirstLastFrameToVideo",
        {
            "positive": "positive",
            "negative": "negative",
            "vae": "vae",
            "start_image": "start_image",
            "end_image": "end_image",
            "clip_vision_start_image": "clip_vision_start_image",
            "clip_vision_end_image": "clip_vision_end_image",
        },
        {},
        {"positive": 0, "negative": 1, "latent": 2},
    ),
    "LoadCLIPVision": _Out("CLIPVisionLoader", {}, {}, {"clip_vision": 0}),
    "CLIPVisionEncode": _Out(
        "CLIPVisionEncode", {"clip_vision": "clip_vision", "image": "image"}, {}, {"clip_vision_output": 0}
    ),
    "Wan22ImageToVideoLatent": _Out(
        "Wan22ImageToVideoLatent", {"vae": "vae", "start_image": "start_image"}, {}, {"latent": 0}
    ),
    # The editing nodes (nodes/comfy/mapping_edit.py); our resize areas have no ComfyUI widget (its are fixed).
    "TextEncodeQwenImageEdit": _Out(
        "TextEncodeQwenImageEdit",
        {"clip": "text_encoder", "vae": "vae", "image": "image"},
        {},
        {"conditioning": 0},
    ),
    "TextEncodeQwenImageEditPlus": _Out(
        "TextEncodeQwenImageEditPlus",
        {"clip": "text_encoder", "vae": "vae", **{f"image{i}": f"image{i}" for i in (1, 2, 3)}},
        {},
        {"conditioning": 0},
    ),
    "FluxKontextImageScale": _Out("FluxKontextImageScale", {"image": "image"}, {}, {"image": 0}),
}


# The LTX-2 and SIGMAS types, and the Sampler with a schedule as a SamplerCustomAdvanced (issue 32).
EXPORTERS = {**EXPORTERS, **ltx2_exporters(_Out, _sampler_widgets, _text_encoder_loader)}


def _exporter(node: NodeInstance) -> _Out:
    out = EXPORTERS[node.type]
    return out if isinstance(out, _Out) else out(node)


def _widget_names(node: NodeInstance, out: _Out, registry: NodeRegistry) -> dict[str, str]:
    """ComfyUI widget -> our param: the params' declared `comfy` names, for a type with one fixed
    counterpart class; an exporter that picks among classes (LoRA, ControlNet, CLIP loaders) lists its own."""
    names: dict[str, str] = {}
    if isinstance(EXPORTERS[node.type], _Out) or out.declared_widgets:
        names = {p.comfy: p.name for p in registry[node.type].params if p.comfy}
    return {**names, **out.params}


def _folded_llm_loaders(wf: Workflow) -> dict[str, str]:
    """Load LLM nodes an import added for TextGenerate (`meta.comfyui.llm_of`) whose text-encoder loader is
    still in the graph with the same file: id -> the loader's id. They are written as that loader."""
    comfy = wf.meta.get(COMFY_META_KEY) if isinstance(wf.meta, dict) else None
    llm_of = comfy.get("llm_of") if isinstance(comfy, dict) else None
    folded: dict[str, str] = {}
    for llm_id, loader_id in (llm_of or {}).items() if isinstance(llm_of, dict) else ():
        llm, loader = wf.nodes.get(llm_id), wf.nodes.get(loader_id) if isinstance(loader_id, str) else None
        if (
            llm is not None
            and loader is not None
            and llm.type == "LoadLLM"
            and loader.type == "LoadTextEncoder"
        ):
            if llm.params.get("path") == loader.params.get("path"):
                folded[llm_id] = loader_id
    return folded


def comfy_ids(wf: Workflow) -> dict[str, str]:
    """Our node id -> its ComfyUI id: the one an import kept (`meta.comfyui.ids`), else the next free number
    ("1", "2", ... in the workflow's order), so a round trip writes ComfyUI's own ids back."""
    comfy = wf.meta.get(COMFY_META_KEY) if isinstance(wf.meta, dict) else None
    kept = comfy.get("ids") if isinstance(comfy, dict) else None
    kept = kept if isinstance(kept, dict) else {}
    ids: dict[str, str] = {}
    for nid in wf.nodes:
        theirs = kept.get(nid)
        if isinstance(theirs, str) and theirs and theirs not in ids.values():
            ids[nid] = theirs
    used, number = set(ids.values()), 0
    for nid in wf.nodes:
        if nid not in ids:
            number += 1
            while str(number) in used:
                number += 1
            ids[nid] = str(number)
            used.add(ids[nid])
    return ids


def export_api(wf: Workflow, registry: NodeRegistry) -> dict[str, Any]:
    """The ComfyUI API prompt for `wf` (validated, so every parameter is filled)."""
    wf = without_reroutes(wf, registry)  # the API format has no reroutes: their wires are joined
    folded = _folded_llm_loaders(wf)  # an imported TextGenerate's Load LLM -> the text encoder it came from
    missing = [
        f"{nid} ({n.type})" for nid, n in wf.nodes.items() if n.type not in EXPORTERS and nid not in folded
    ]
    if missing:
        raise ExportError(
            f"{wf.source}: no ComfyUI counterpart for node(s) {', '.join(missing)}; "
            f"exportable types: {', '.join(EXPORTERS)}"
        )
    ids = comfy_ids(wf)
    prompt: dict[str, Any] = {}
    for nid, node in wf.nodes.items():
        if nid in folded:
            continue
        out = _exporter(node)
        params = dict(node.params)
        names = _widget_names(node, out, registry)
        widgets = {theirs: params.get(ours) for theirs, ours in names.items()}
        if out.convert:
            widgets.update(out.convert(params))
        widgets.update(dict(out.fixed))
        inputs: dict[str, Any] = {k: v for k, v in widgets.items() if v is not None}
        if node.type in ("Sampler", "SamplerAdvanced") and isinstance(inputs.get("cfg"), int | float):
            inputs["cfg"] = inputs["cfg"] + comfy_cfg_offset(wf, nid)
        wired = {ours: theirs for theirs, ours in out.inputs.items()}
        wired.update({ours: theirs for theirs, ours in names.items()})  # a param fed by a wire
        for port, link in node.inputs.items():
            if port in out.drop:
                continue
            if port not in wired:
                raise ExportError(
                    f"{wf.source}: node {nid}: input {port!r} has no {out.class_type} counterpart"
                )
            theirs = wired[port]
            if link.node in folded:  # TextGenerate's clip: the text-encoder loader, output 0
                inputs[theirs] = [ids[folded[link.node]], 0]
                continue
            source = wf.nodes[link.node]
            slot = _exporter(source).outputs.get(link.output)
            if slot is None:
                raise ExportError(
                    f"{wf.source}: node {nid}: {source.type}.{link.output} has no ComfyUI output"
                )
            inputs[theirs] = [ids[link.node], slot]
        prompt[ids[nid]] = {"class_type": out.class_type, "inputs": inputs, "_meta": {"title": nid}}
    add_cfg_norms(wf, prompt, ids)  # before the fold: a custom sampler's guider takes the CFGNorm's model
    return fold_custom_samplers(prompt)
