"""ComfyUI's SIGMAS nodes, and its custom samplers when their schedule is one (not BasicScheduler's steps).

Lives here: `SIGMA_MAPPERS`, `SIGMA_CLASSES`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit and
helpers), `nodes.comfy.mapping_sampling` (the plain case, delegated to) and `nodes.comfy.mapping_ltx2` (which
guiders are LTX-2 Guidance nodes).

ManualSigmas, SetFirstSigma and LTXVScheduler become our nodes of those names (nodes/sigmas.py), whose SIGMAS
output feeds the Sampler's `sigmas` input: the loop steps through the list as it is (and its first level says
how much of the input latent is kept), so the SamplerCustomAdvanced becomes a Sampler with that wire, for any
family whose loop takes a schedule (pipelines.diffusion.manual_sigmas.SIGMA_LOOPS; the others refuse it when
run, naming the family). A sampler whose parts are the plain ones (BasicScheduler, BasicGuider / CFGGuider) maps
as before (mapping_sampling); one whose guider is an LTX-2 Guidance node takes its denoiser from that node.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, _emit, _enabled, _get, unsupported_emit
from nodes.comfy.mapping_ltx2 import is_ltx2_graph, ltx2_sampler_name
from nodes.comfy.mapping_sampling import SAMPLING_MAPPERS

SIGMA_CLASSES = ("ManualSigmas", "SetFirstSigma", "LTXVScheduler")
_PLAIN_SIGMAS = ("BasicScheduler", "Flux2Scheduler")
_GUIDERS = ("BasicGuider", "CFGGuider", "LTXVDualCFGGuider")


def _source(node: ComfyNode, ctx: MapContext, name: str) -> ComfyNode | None:
    link = node.inputs.get(name)
    return ctx.graph.nodes.get(link.node) if isinstance(link, LinkRef) else None


def _manual(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "ManualSigmas", {}, ("sigmas",))  # sigmas: declared


def _set_first(node: ComfyNode, ctx: MapContext) -> Emit:
    return _emit(node, "SetFirstSigma", {}, ("sigmas",), sigmas="sigmas")  # sigma: declared


def _ltxv_scheduler(node: ComfyNode, ctx: MapContext) -> Emit:
    if isinstance(node.inputs.get("latent"), LinkRef):
        ctx.graph.note(
            node, "the shift counts the video latent's frames x height x width (its tokens before patches)"
        )
    return _emit(node, "LTXVScheduler", {}, ("sigmas",), latent="latent")


def _steps(sigmas: ComfyNode) -> Any:
    """The step count a ManualSigmas list gives (shown on our Sampler; the list itself is what runs)."""
    text = _get(sigmas, "sigmas")
    if sigmas.class_type == "ManualSigmas" and isinstance(text, str):
        from pipelines.diffusion.manual_sigmas import parse_sigmas

        try:
            return max(len(parse_sigmas(text)) - 1, 1)
        except ValueError:
            return 20
    return _get(sigmas, "steps", 20)


def _guided(guider: ComfyNode, ctx: MapContext) -> tuple[Any, Any, Any, Any] | str:
    """(cfg, denoiser link, positive, negative) of a guider, or why it does not map."""
    ltx2 = is_ltx2_graph(ctx.graph)
    if guider.class_type not in _GUIDERS or (guider.class_type == "LTXVDualCFGGuider" and not ltx2):
        return f"its guider is {guider.class_type} (BasicGuider, CFGGuider, LTXVDualCFGGuider map here)"
    model = (
        LinkRef(guider.id, 0) if ltx2 and guider.class_type != "BasicGuider" else guider.inputs.get("model")
    )
    if guider.class_type == "BasicGuider":
        return 1.0, model, guider.inputs.get("conditioning"), None
    return _get(guider, "cfg", 8.0), model, guider.inputs.get("positive"), guider.inputs.get("negative")


def _build(
    node: ComfyNode,
    ctx: MapContext,
    *,
    seed: Any,
    cfg: Any,
    wires: dict[str, Any],
    sampler: ComfyNode | None,
    sigmas: ComfyNode,
) -> Emit:
    name = _get(sampler, "sampler_name", "euler") if sampler is not None else "euler"
    params: dict[str, Any] = {
        "scheduler": ltx2_sampler_name(name, node, ctx),
        "steps": _steps(sigmas),
        "cfg": cfg,
        "seed": seed,
    }
    emit = Emit("Sampler", {}, {}, ("latent", "latent"))
    for key, value in params.items():
        (emit.inputs if isinstance(value, LinkRef) else emit.params)[key] = value
    emit.inputs.update({k: v for k, v in wires.items() if v is not None})
    if sigmas.class_type in _PLAIN_SIGMAS:  # a named schedule with an LTX-2 guider: steps and denoise
        emit.params |= {
            "sigma_schedule": _get(sigmas, "scheduler", "simple"),
            "denoise": _get(sigmas, "denoise", 1.0),
        }
    else:
        emit.inputs["sigmas"] = LinkRef(sigmas.id, 0)
    return emit


def _custom_advanced(node: ComfyNode, ctx: MapContext) -> Emit:
    sigmas, guider = _source(node, ctx, "sigmas"), _source(node, ctx, "guider")
    ltx2_guider = guider is not None and is_ltx2_graph(ctx.graph) and guider.class_type != "BasicGuider"
    if sigmas is None or guider is None or (sigmas.class_type in _PLAIN_SIGMAS and not ltx2_guider):
        return SAMPLING_MAPPERS["SamplerCustomAdvanced"](node, ctx)  # the plain case, or why not
    if sigmas.class_type not in (*SIGMA_CLASSES, *_PLAIN_SIGMAS):
        return unsupported_emit(
            node, f"its sigmas come from {sigmas.class_type} ({', '.join(SIGMA_CLASSES)} map here)"
        )
    noise, sampler = _source(node, ctx, "noise"), _source(node, ctx, "sampler")
    if noise is None or noise.class_type != "RandomNoise":
        what = noise.class_type if noise is not None else "nothing"
        return unsupported_emit(
            node, f"its noise is {what}; with a SIGMAS schedule only RandomNoise maps here"
        )
    if sampler is None or sampler.class_type != "KSamplerSelect":
        what = sampler.class_type if sampler is not None else "nothing"
        return unsupported_emit(node, f"its sampler is {what} (KSamplerSelect maps here)")
    guided = _guided(guider, ctx)
    if isinstance(guided, str):
        return unsupported_emit(node, guided)
    cfg, model, positive, negative = guided
    wires = {
        "denoiser": model,
        "positive": positive,
        "negative": negative,
        "latent": node.inputs.get("latent_image"),
    }
    return _build(
        node, ctx, seed=_get(noise, "noise_seed", 0), cfg=cfg, wires=wires, sampler=sampler, sigmas=sigmas
    )


def _custom(node: ComfyNode, ctx: MapContext) -> Emit:
    sigmas = _source(node, ctx, "sigmas")
    if sigmas is None or sigmas.class_type not in SIGMA_CLASSES:
        return SAMPLING_MAPPERS["SamplerCustom"](node, ctx)
    sampler = _source(node, ctx, "sampler")
    if sampler is None or sampler.class_type != "KSamplerSelect":
        return unsupported_emit(node, "its sampler is not a KSamplerSelect")
    if _enabled(_get(node, "add_noise", True)) is False:
        return unsupported_emit(node, "add_noise off with a SIGMAS schedule is not mapped here")
    wires = {
        "denoiser": node.inputs.get("model"),
        "positive": node.inputs.get("positive"),
        "negative": node.inputs.get("negative"),
        "latent": node.inputs.get("latent_image"),
    }
    return _build(
        node,
        ctx,
        seed=_get(node, "noise_seed", 0),
        cfg=_get(node, "cfg", 8.0),
        wires=wires,
        sampler=sampler,
        sigmas=sigmas,
    )


SIGMA_MAPPERS: dict[str, Mapper] = {
    "ManualSigmas": _manual,
    "SetFirstSigma": _set_first,
    "LTXVScheduler": _ltxv_scheduler,
    "SamplerCustomAdvanced": _custom_advanced,
    "SamplerCustom": _custom,
}
