"""Writing the LTX-2 and SIGMAS node types back as ComfyUI's classes (`app export-comfy`), and a Sampler with a
`sigmas` wire as the SamplerCustomAdvanced it came from.

Lives here: `ltx2_exporters`, `fold_custom_samplers`. Imports `nodes.workflow` (NodeInstance); export.py passes
its own pieces (`_Out`, the KSampler widgets, the text-encoder exporter) to `ltx2_exporters`, merges the
table and calls the fold, so this module does not import it back.

ComfyUI's custom sampler is four nodes where ours is one: a Sampler with a `sigmas` wire is written as a
SamplerCustomAdvanced whose model, prompts, cfg, seed and sampler name are parked on it, and
`fold_custom_samplers` then adds the RandomNoise and KSamplerSelect nodes and the guider: the LTX-2 Guidance
node the model comes from (a CFGGuider, or an LTXVDualCFGGuider when its sound CFG differs), else a new
CFGGuider (BasicGuider without a negative). Importing the result gives the same nodes again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.workflow import NodeInstance

Exporter = Any  # export._Out, or a function of a node giving one
_LTX2_GUIDER = "_ltx2_guidance"  # a parked marker on an exported LTX-2 Guidance, removed by the fold


def ltx2_exporters(
    out: Callable[..., Any],
    sampler_widgets: Callable[[dict[str, Any]], dict[str, Any]],
    text_encoder: Exporter,
) -> dict[str, Exporter]:
    """The table export.py merges (`out`: its `_Out`; the KSampler widgets and CLIP-loader exporter it has)."""

    def sampler(node: NodeInstance) -> Any:
        wires = {
            "model": "denoiser",
            "positive": "positive",
            "negative": "negative",
            "latent_image": "latent",
        }
        if "sigmas" not in node.inputs:  # the KSampler, as export.py writes it (declared widgets included)
            return out("KSampler", wires, {}, {"latent": 0}, convert=sampler_widgets, declared_widgets=True)
        return out(
            "SamplerCustomAdvanced",
            wires | {"sigmas": "sigmas"},
            {"cfg": "cfg", "noise_seed": "seed"},
            {"latent": 0},
            convert=lambda p: {"sampler_name": sampler_widgets(p)["sampler_name"]},
        )

    def encoder(node: NodeInstance) -> Any:
        if node.params.get("family") != "ltx2":
            return text_encoder(node)
        if node.params.get("path_2"):  # Gemma + the checkpoint's connectors
            names = {"text_encoder": "path", "ckpt_name": "path_2"}
            return out("LTXAVTextEncoderLoader", {}, names, {"text_encoder": 0})
        return out("CLIPLoader", {}, {"clip_name": "path"}, {"text_encoder": 0}, (("type", "ltxv"),))

    def guidance(p: dict[str, Any]) -> dict[str, Any]:
        return {"audio_cfg": p.get("audio_cfg", 1.0), _LTX2_GUIDER: True}

    return {
        "Sampler": sampler,
        "LoadTextEncoder": encoder,
        "ManualSigmas": out("ManualSigmas", {}, {}, {"sigmas": 0}),
        "SetFirstSigma": out("SetFirstSigma", {"sigmas": "sigmas"}, {}, {"sigmas": 0}),
        "LTXVScheduler": out("LTXVScheduler", {"latent": "latent"}, {}, {"sigmas": 0}),
        "LTX2Guidance": out("CFGGuider", {"model": "denoiser"}, {}, {"denoiser": 0}, convert=guidance),
        "EmptyLTXVLatentVideo": out(
            "EmptyLTXVLatentVideo",
            {},
            {},
            {"latent": 0},
            (("batch_size", 1),),
            drop=frozenset({"vae", "denoiser", "fps"}),
        ),
        "LTXVEmptyLatentAudio": out("LTXVEmptyLatentAudio", {"audio_vae": "vae"}, {}, {"latent": 0}),
        "LTXVConcatAVLatent": out(
            "LTXVConcatAVLatent",
            {"video_latent": "video_latent", "audio_latent": "audio_latent"},
            {},
            {"latent": 0},
        ),
        "LTXVSeparateAVLatent": out(
            "LTXVSeparateAVLatent", {"av_latent": "av_latent"}, {}, {"video_latent": 0, "audio_latent": 1}
        ),
        "LTXVAudioVAEDecode": out(
            "LTXVAudioVAEDecode", {"samples": "latent", "audio_vae": "vae"}, {}, {"audio": 0}
        ),
        "LTXVPreprocess": out("LTXVPreprocess", {"image": "image"}, {}, {"image": 0}),
        "LTXVImgToVideoInplace": out(
            "LTXVImgToVideoInplace", {"vae": "vae", "image": "image", "latent": "latent"}, {}, {"latent": 0}
        ),
        "LoadLatentUpsampler": out("LatentUpscaleModelLoader", {}, {}, {"upscale_model": 0}),
        "LTXVLatentUpsampler": out(
            "LTXVLatentUpsampler",
            {"samples": "latent", "upscale_model": "upscale_model", "vae": "vae"},
            {},
            {"latent": 0},
        ),
        "LTXVDecodeFrames": out("VAEDecode", {"samples": "latent", "vae": "vae"}, {}, {"image": 0}),
        "EmptyImage": out("EmptyImage", {}, {}, {"image": 0}),
    }


def _new_id(prompt: dict[str, Any]) -> str:
    number = len(prompt) + 1
    while str(number) in prompt:
        number += 1
    return str(number)


def _guider(prompt: dict[str, Any], model: Any, positive: Any, negative: Any, cfg: Any, title: str) -> str:
    """The guider node id for one custom sampler (the exported LTX-2 Guidance when the model is one)."""
    source = prompt.get(model[0]) if isinstance(model, list) else None
    if source is not None and source["inputs"].get(_LTX2_GUIDER) and "positive" not in source["inputs"]:
        inputs = source["inputs"]
        inputs.pop(_LTX2_GUIDER)
        audio_cfg = inputs.pop("audio_cfg", cfg)
        inputs |= {"positive": positive, "negative": negative, "cfg": cfg}
        if audio_cfg != cfg:
            source["class_type"] = "LTXVDualCFGGuider"
            inputs["audio_cfg"] = audio_cfg
        return model[0]
    if source is not None and source["class_type"] in ("CFGGuider", "LTXVDualCFGGuider"):
        model = source["inputs"].get("model")  # one guidance node feeding two samplers: a guider each
    gid = _new_id(prompt)
    if negative is None:
        prompt[gid] = {"class_type": "BasicGuider", "inputs": {"model": model, "conditioning": positive}}
    else:
        inputs = {"model": model, "positive": positive, "negative": negative, "cfg": cfg}
        prompt[gid] = {"class_type": "CFGGuider", "inputs": inputs}
    prompt[gid]["_meta"] = {"title": f"{title} guider"}
    return gid


def fold_custom_samplers(prompt: dict[str, Any]) -> dict[str, Any]:
    """Each parked SamplerCustomAdvanced with its noise, sampler and guider nodes (see the module docstring)."""
    for entry in list(prompt.values()):
        inputs = entry["inputs"]
        if entry["class_type"] != "SamplerCustomAdvanced" or "model" not in inputs:
            continue
        title = str(entry.get("_meta", {}).get("title", "sampler"))
        model, positive, negative = (
            inputs.pop("model"),
            inputs.pop("positive", None),
            inputs.pop("negative", None),
        )
        cfg, seed = inputs.pop("cfg", 1.0), inputs.pop("noise_seed", 0)
        noise = _new_id(prompt)
        prompt[noise] = {
            "class_type": "RandomNoise",
            "inputs": {"noise_seed": seed},
            "_meta": {"title": f"{title} noise"},
        }
        select = _new_id(prompt)
        prompt[select] = {
            "class_type": "KSamplerSelect",
            "inputs": {"sampler_name": inputs.pop("sampler_name", "euler")},
            "_meta": {"title": f"{title} sampler"},
        }
        guider = _guider(prompt, model, positive, negative, cfg, title)
        inputs |= {"noise": [noise, 0], "guider": [guider, 0], "sampler": [select, 0]}
    for entry in prompt.values():  # a guidance node no custom sampler took: its parked values go
        if entry["inputs"].pop(_LTX2_GUIDER, None):
            entry["inputs"].pop("audio_cfg", None)
    return prompt
