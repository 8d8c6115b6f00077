"""What Nodeloom knows of ComfyUI's node classes: widget names in order and output names in order.

Lives here: `ComfyClass`, `COMFY_CLASSES`, `CONTROL_VALUES`, `widget_values_by_name`.
Imports nothing from Nodeloom (pure data and one function).

UI-format files store widget values as a list (`widgets_values`) in the order ComfyUI declares the
widgets, and API-format links name an output by its index, so both need this table. Widget values are
matched by name, never by position alone: ComfyUI inserts a `control_after_generate` value ("fixed",
"randomize", ...) after a seed-like INT, and the number of widgets drifts across ComfyUI versions (a
CLIPLoader gained `device`, for example); missing trailing values take defaults and extra ones are
reported, not guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The values ComfyUI stores for a seed widget's "control after generate" companion.
CONTROL_VALUES = frozenset({"fixed", "increment", "decrement", "randomize"})
SEED_WIDGETS = frozenset({"seed", "noise_seed"})


@dataclass(frozen=True)
class ComfyClass:
    widgets: tuple[str, ...] = ()  # in ComfyUI's declaration order
    outputs: tuple[str, ...] = ()  # ComfyUI output names (types), by index


COMFY_CLASSES: dict[str, ComfyClass] = {
    "CheckpointLoaderSimple": ComfyClass(("ckpt_name",), ("MODEL", "CLIP", "VAE")),
    "UNETLoader": ComfyClass(("unet_name", "weight_dtype"), ("MODEL",)),
    "CLIPLoader": ComfyClass(("clip_name", "type", "device"), ("CLIP",)),
    "DualCLIPLoader": ComfyClass(("clip_name1", "clip_name2", "type", "device"), ("CLIP",)),
    "TripleCLIPLoader": ComfyClass(("clip_name1", "clip_name2", "clip_name3"), ("CLIP",)),
    "VAELoader": ComfyClass(("vae_name",), ("VAE",)),
    "CLIPTextEncode": ComfyClass(("text",), ("CONDITIONING",)),
    "CLIPTextEncodeFlux": ComfyClass(("clip_l", "t5xxl", "guidance"), ("CONDITIONING",)),
    "CLIPSetLastLayer": ComfyClass(("stop_at_clip_layer",), ("CLIP",)),
    "ConditioningZeroOut": ComfyClass((), ("CONDITIONING",)),
    "FluxGuidance": ComfyClass(("guidance",), ("CONDITIONING",)),
    "ModelSamplingSD3": ComfyClass(("shift",), ("MODEL",)),
    "ImageFromBatch": ComfyClass(("batch_index", "length"), ("IMAGE",)),
    "BatchImagesNode": ComfyClass((), ("IMAGE",)),
    "EasyCache": ComfyClass(("reuse_threshold", "start_percent", "end_percent", "verbose"), ("MODEL",)),
    "LazyCache": ComfyClass(("reuse_threshold", "start_percent", "end_percent", "verbose"), ("MODEL",)),
    "ModelSamplingAuraFlow": ComfyClass(("shift",), ("MODEL",)),
    "ModelSamplingFlux": ComfyClass(("max_shift", "base_shift", "width", "height"), ("MODEL",)),
    "EmptyLatentImage": ComfyClass(("width", "height", "batch_size"), ("LATENT",)),
    "EmptySD3LatentImage": ComfyClass(("width", "height", "batch_size"), ("LATENT",)),
    "KSampler": ComfyClass(("seed", "steps", "cfg", "sampler_name", "scheduler", "denoise"), ("LATENT",)),
    "KSamplerAdvanced": ComfyClass(
        (
            "add_noise",
            "noise_seed",
            "steps",
            "cfg",
            "sampler_name",
            "scheduler",
            "start_at_step",
            "end_at_step",
            "return_with_leftover_noise",
        ),
        ("LATENT",),
    ),
    "VAEDecode": ComfyClass((), ("IMAGE",)),
    "VAEEncode": ComfyClass((), ("LATENT",)),
    "LoadImage": ComfyClass(("image", "upload"), ("IMAGE", "MASK")),
    "SaveImage": ComfyClass(("filename_prefix",), ()),
    "PreviewImage": ComfyClass((), ()),
    "ImageScale": ComfyClass(("upscale_method", "width", "height", "crop"), ("IMAGE",)),
    "ImageScaleBy": ComfyClass(("upscale_method", "scale_by"), ("IMAGE",)),
    "LatentUpscale": ComfyClass(("upscale_method", "width", "height", "crop"), ("LATENT",)),
    "LatentUpscaleBy": ComfyClass(("upscale_method", "scale_by"), ("LATENT",)),
    "LoraLoader": ComfyClass(("lora_name", "strength_model", "strength_clip"), ("MODEL", "CLIP")),
    "LoraLoaderModelOnly": ComfyClass(("lora_name", "strength_model"), ("MODEL",)),
    "ControlNetLoader": ComfyClass(("control_net_name",), ("CONTROL_NET",)),
    "ControlNetApply": ComfyClass(("strength",), ("CONDITIONING",)),
    "ControlNetApplyAdvanced": ComfyClass(
        ("strength", "start_percent", "end_percent"), ("positive", "negative")
    ),
    "UpscaleModelLoader": ComfyClass(("model_name",), ("UPSCALE_MODEL",)),
    "ImageUpscaleWithModel": ComfyClass((), ("IMAGE",)),
    "SetLatentNoiseMask": ComfyClass((), ("LATENT",)),
    "InpaintModelConditioning": ComfyClass(("noise_mask",), ("positive", "negative", "latent")),
    "Note": ComfyClass(("text",), ()),
    "MarkdownNote": ComfyClass(("text",), ()),
    "PrimitiveNode": ComfyClass(("value",), ("value",)),
    "Reroute": ComfyClass((), ("value",)),
    # ComfyUI 2025-26 core nodes (the published templates use them): video, custom sampling, sizes.
    "SaveVideo": ComfyClass(("filename_prefix", "format", "codec"), ()),
    "CreateVideo": ComfyClass(("fps",), ("VIDEO",)),
    "LoadVideo": ComfyClass(("file", "upload"), ("VIDEO",)),
    "KSamplerSelect": ComfyClass(("sampler_name",), ("SAMPLER",)),
    "RandomNoise": ComfyClass(("noise_seed",), ("NOISE",)),
    "DisableNoise": ComfyClass((), ("NOISE",)),
    "BasicScheduler": ComfyClass(("scheduler", "steps", "denoise"), ("SIGMAS",)),
    "Flux2Scheduler": ComfyClass(("steps", "width", "height"), ("SIGMAS",)),
    "BasicGuider": ComfyClass((), ("GUIDER",)),
    "CFGGuider": ComfyClass(("cfg",), ("GUIDER",)),
    "SamplerCustomAdvanced": ComfyClass((), ("output", "denoised_output")),
    "SamplerCustom": ComfyClass(("add_noise", "noise_seed", "cfg"), ("output", "denoised_output")),
    "GetVideoComponents": ComfyClass((), ("images", "audio", "fps", "bit_depth", "color_space")),
    "VAEDecodeTiled": ComfyClass(("tile_size", "overlap", "temporal_size", "temporal_overlap"), ("IMAGE",)),
    "PreviewAny": ComfyClass((), ()),
    "ComfySwitchNode": ComfyClass(("switch",), ("output",)),
    "CFGNorm": ComfyClass(("strength", "pre_cfg"), ("patched_model",)),  # pre_cfg: newer ComfyUI's
    "ImageScaleToTotalPixels": ComfyClass(("upscale_method", "megapixels", "resolution_steps"), ("IMAGE",)),
    "ResolutionSelector": ComfyClass(("aspect_ratio", "megapixels", "multiple_of"), ("width", "height")),
    "StringConcatenate": ComfyClass(("string_a", "string_b", "delimiter"), ("STRING",)),
    "StringReplace": ComfyClass(("string", "find", "replace"), ("STRING",)),
    "EmptyFlux2LatentImage": ComfyClass(("width", "height", "batch_size"), ("LATENT",)),
    "GetImageSize": ComfyClass((), ("width", "height", "batch_size")),
    "ReferenceLatent": ComfyClass((), ("CONDITIONING",)),
    "EmptyHunyuanLatentVideo": ComfyClass(("width", "height", "length", "batch_size"), ("LATENT",)),
    "ComfyMathExpression": ComfyClass(("expression",), ("FLOAT", "INT", "BOOL")),
    "SaveImageAdvanced": ComfyClass(("filename_prefix", "format", "bit_depth", "color_space"), ()),
    "ImageCompare": ComfyClass((), ()),
    "DifferentialDiffusion": ComfyClass(("strength",), ("MODEL",)),
    "VAEEncodeTiled": ComfyClass(("tile_size", "overlap", "temporal_size", "temporal_overlap"), ("LATENT",)),
    # Hand-given schedules and ComfyUI's LTX-2 nodes (issue 32: nodes/comfy/mapping_sigmas.py, mapping_ltx2.py).
    "ManualSigmas": ComfyClass(("sigmas",), ("SIGMAS",)),
    "SetFirstSigma": ComfyClass(("sigma",), ("SIGMAS",)),
    "LTXVScheduler": ComfyClass(("steps", "max_shift", "base_shift", "stretch", "terminal"), ("SIGMAS",)),
    "LTXVDualCFGGuider": ComfyClass(("cfg", "audio_cfg"), ("GUIDER",)),
    "EmptyLTXVLatentVideo": ComfyClass(("width", "height", "length", "batch_size"), ("LATENT",)),
    "LTXVEmptyLatentAudio": ComfyClass(("frames_number", "frame_rate", "batch_size"), ("Latent",)),
    "LTXVConditioning": ComfyClass(("frame_rate",), ("positive", "negative")),
    "LTXVPreprocess": ComfyClass(("img_compression",), ("output_image",)),
    "LTXVImgToVideoInplace": ComfyClass(("strength", "bypass"), ("latent",)),
    "LTXVConcatAVLatent": ComfyClass((), ("latent",)),
    "LTXVSeparateAVLatent": ComfyClass((), ("video_latent", "audio_latent")),
    "LTXVAudioVAEDecode": ComfyClass((), ("Audio",)),
    "LTXVAudioVAELoader": ComfyClass(("ckpt_name",), ("Audio VAE",)),
    "LTXAVTextEncoderLoader": ComfyClass(("text_encoder", "ckpt_name", "device"), ("CLIP",)),
    "LTXVCropGuides": ComfyClass((), ("positive", "negative", "latent")),
    "LatentUpscaleModelLoader": ComfyClass(("model_name",), ("LATENT_UPSCALE_MODEL",)),
    "LTXVLatentUpsampler": ComfyClass((), ("LATENT",)),
    "EmptyImage": ComfyClass(("width", "height", "batch_size", "color"), ("IMAGE",)),
    # TextGenerate's widgets with sampling_mode "on" (the templates' setting; nodes/comfy/mapping_text.py).
    "TextGenerateLTX2Prompt": ComfyClass(
        (
            "prompt",
            "max_length",
            "sampling_mode",
            "sampling_mode.temperature",
            "sampling_mode.top_k",
            "sampling_mode.top_p",
            "sampling_mode.min_p",
            "sampling_mode.repetition_penalty",
            "sampling_mode.seed",
            "sampling_mode.presence_penalty",
            "thinking",
            "use_default_template",
        ),
        ("generated_text",),
    ),
    # Wan (nodes/comfy/mapping_wan.py).
    "WanImageToVideo": ComfyClass(
        ("width", "height", "length", "batch_size"), ("positive", "negative", "latent")
    ),
    "WanFirstLastFrameToVideo": ComfyClass(
        ("width", "height", "length", "batch_size"), ("positive", "negative", "latent")
    ),
    "Wan22ImageToVideoLatent": ComfyClass(("width", "height", "length", "batch_size"), ("LATENT",)),
    "CLIPVisionLoader": ComfyClass(("clip_name",), ("CLIP_VISION",)),
    "CLIPVisionEncode": ComfyClass(("crop",), ("CLIP_VISION_OUTPUT",)),
    # ComfyUI's MiniMax H3 nodes (comfy_extras/nodes_minimax_h3.py) and the audio decode its templates use.
    "MiniMaxH3SigmaShift": ComfyClass(("shift_video", "shift_audio"), ("MODEL",)),
    "MiniMaxH3ReferenceToVideo": ComfyClass(
        ("prompt", "width", "height", "length", "ref_image_size"), ("CONDITIONING", "LATENT")
    ),
    "VAEDecodeAudio": ComfyClass((), ("AUDIO",)),
    "TextEncodeQwenImageEdit": ComfyClass(("prompt",), ("CONDITIONING",)),
    "TextEncodeQwenImageEditPlus": ComfyClass(("prompt",), ("CONDITIONING",)),
    "FluxKontextImageScale": ComfyClass((), ("IMAGE",)),
    "FluxKontextMultiReferenceLatentMethod": ComfyClass(("reference_latents_method",), ("CONDITIONING",)),
    "ImageStitch": ComfyClass(
        ("direction", "match_image_size", "spacing_width", "spacing_color"), ("IMAGE",)
    ),
    # Qwen-Image 2.1 (nodes/comfy/mapping_qwen21.py)
    "TextEncodeQwenImage21": ComfyClass(
        ("prompt", "negative_prompt", "resolution"), ("positive", "negative", "latent")
    ),
    "QwenImage21Cache": ComfyClass(("device", "dtype"), ("MODEL",)),
    # CameraAngle (nodes/comfy/mapping_camera.py); `view` is the editor's 3D preview state (socketless), not read
    "CameraAngle": ComfyClass(
        ("horizontal_angle", "vertical_angle", "zoom", "view"), ("camera_info", "prompt")
    ),
    "SDTurboScheduler": ComfyClass(("steps", "denoise"), ("SIGMAS",)),  # nodes/comfy/mapping_turbo.py
    "Canny": ComfyClass(("low_threshold", "high_threshold"), ("IMAGE",)),  # nodes/comfy/canny_node.py
}


def widget_values_by_name(
    names: tuple[str, ...] | list[str], values: list[Any]
) -> tuple[dict[str, Any], list[str]]:
    """Name each stored widget value; returns (values by name, notes on what did not line up).

    A control_after_generate value after a seed-like widget is skipped when present (older files and
    other nodes' INTs have none). Missing trailing values are left out (the caller uses defaults).
    """
    named: dict[str, Any] = {}
    notes: list[str] = []
    i = 0
    for name in names:
        if i >= len(values):
            missing = list(names[list(names).index(name) :])
            notes.append(f"no stored value for {', '.join(missing)} (defaults used)")
            break
        named[name] = values[i]
        i += 1
        if (
            name in SEED_WIDGETS
            and i < len(values)
            and isinstance(values[i], str)
            and values[i] in CONTROL_VALUES
        ):
            i += 1  # the "control after generate" companion: an editor setting, not an input
    if i < len(values):
        extra = values[i:]
        notes.append(f"{len(extra)} extra widget value(s) ignored: {extra!r}")
    return named, notes
