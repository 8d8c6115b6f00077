"""ComfyUI's custom-sampling nodes folded onto our Sampler, and the model patches around sampling.

Lives here: `SAMPLING_MAPPERS`, `apply_cfg_rule`, `note_unapplied_cfg_norms`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping`
(Emit, PassThrough, the KSampler helpers) and `pipelines.diffusion.guidance` (the rule names; no torch).

ComfyUI splits a KSampler into parts: SamplerCustomAdvanced takes a NOISE (RandomNoise / DisableNoise), a
GUIDER (BasicGuider: no CFG; CFGGuider: cfg), a SAMPLER (KSamplerSelect) and SIGMAS (BasicScheduler). In
the plain case, where each part is one of those, the whole is exactly one KSampler (or KSamplerAdvanced
without added noise), so the SamplerCustomAdvanced node becomes our Sampler and the parts fold into it (they
emit no node). Any other part (ManualSigmas, SplitSigmas, a DualCFGGuider, ...) leaves the sampler
unsupported, naming the part. SamplerCustom (the one-node form) maps the same way.

ComfyUI guides every model with its plain CFG; the Qwen-Image family's pipelines do not (a norm rescale), so
an imported Qwen-Image sampler gets `cfg_rule` comfyui (`pipelines.diffusion.guidance`). ComfyUI's CFGNorm
patches the MODEL; here it is the Sampler's rule: the node passes its model through and annotates the wire,
and `apply_cfg_rule` (called by nodes/comfy/convert.py once the sampler's family is known) sets
`cfg_rule` comfyui_cfgnorm and `cfg_norm` to its strength, or says it is not applied.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.mapping import (
    Emit,
    MapContext,
    Mapper,
    PassThrough,
    _enabled,
    _get,
    comfy_sampler_name,
    unsupported_emit,
)
from pipelines.diffusion.guidance import CFG_RULE_LOOPS

_PARTS = {
    "noise": ("RandomNoise", "DisableNoise"),
    "guider": ("BasicGuider", "CFGGuider"),
    "sampler": ("KSamplerSelect",),
    # Flux2Scheduler is FLUX.2's own schedule (its empirical mu over linspace(1, 0, steps + 1)), which our
    # FLUX.2 loop computes itself (pipelines/diffusion/flux2_sampling.py, from the latent's token count).
    "sigmas": ("BasicScheduler", "Flux2Scheduler"),
}
_FOLDED = (
    "RandomNoise",
    "DisableNoise",
    "BasicGuider",
    "CFGGuider",
    "KSamplerSelect",
    "BasicScheduler",
    "Flux2Scheduler",
)


def _part(node: ComfyNode, ctx: MapContext, name: str) -> ComfyNode | str:
    """The node feeding input `name`, or why it is not a plain part."""
    link = node.inputs.get(name)
    source = ctx.graph.nodes.get(link.node) if isinstance(link, LinkRef) else None
    if source is None:
        return f"its {name} input is not connected"
    if source.class_type not in _PARTS[name]:
        return f"its input {name!r} comes from {source.class_type} (only {', '.join(_PARTS[name])} map onto our Sampler)"
    return source


def _sampler(
    node: ComfyNode,
    ctx: MapContext,
    *,
    noise_on: Any,
    seed: Any,
    cfg: Any,
    wires: dict[str, Any],
    sampler: ComfyNode,
    sigmas: ComfyNode,
) -> Emit:
    params = {
        "scheduler": comfy_sampler_name(_get(sampler, "sampler_name", "euler"), node, ctx.graph),
        "sigma_schedule": _get(sigmas, "scheduler", "simple"),
        "steps": _get(sigmas, "steps", 20),
        "cfg": cfg,
        "seed": seed,
    }
    wires = {k: v for k, v in wires.items() if v is not None}
    if sigmas.class_type == "Flux2Scheduler":
        ctx.graph.note(
            node,
            "Flux2Scheduler: FLUX.2's own schedule, counted from the latent here (ComfyUI: its width/height)",
        )
    if noise_on is False:  # the latent already holds its noise: KSamplerAdvanced's add_noise off
        params |= {"add_noise": False, "start_step": 0, "end_step": 10000, "leftover_noise": False}
        if _get(sigmas, "denoise", 1.0) not in (1, 1.0):
            ctx.graph.note(node, "denoise below 1 with DisableNoise: all steps run (set start_step)")
        emit = Emit("SamplerAdvanced", {}, {}, ("latent", "latent"))
    else:
        params["denoise"] = _get(sigmas, "denoise", 1.0)
        emit = Emit("Sampler", {}, {}, ("latent", "latent"))
    for key, value in params.items():
        (emit.inputs if isinstance(value, LinkRef) else emit.params)[key] = value
    emit.inputs.update(wires)
    return emit


def _custom_advanced(node: ComfyNode, ctx: MapContext) -> Emit:
    parts = {name: _part(node, ctx, name) for name in _PARTS}
    why = [p for p in parts.values() if isinstance(p, str)]
    if why:
        return unsupported_emit(node, f"not the plain case: {'; '.join(why)}")
    noise, guider, sampler, sigmas = (parts[n] for n in ("noise", "guider", "sampler", "sigmas"))
    assert isinstance(noise, ComfyNode) and isinstance(guider, ComfyNode)
    assert isinstance(sampler, ComfyNode) and isinstance(sigmas, ComfyNode)
    if guider.class_type == "BasicGuider":
        cfg, positive, negative = 1.0, guider.inputs.get("conditioning"), None
    else:
        cfg, positive, negative = (
            _get(guider, "cfg", 8.0),
            guider.inputs.get("positive"),
            guider.inputs.get("negative"),
        )
    return _sampler(
        node,
        ctx,
        noise_on=noise.class_type == "RandomNoise",
        seed=_get(noise, "noise_seed", 0),
        cfg=cfg,
        wires={
            "denoiser": guider.inputs.get("model"),
            "positive": positive,
            "negative": negative,
            "latent": node.inputs.get("latent_image"),
        },
        sampler=sampler,
        sigmas=sigmas,
    )


def _custom(node: ComfyNode, ctx: MapContext) -> Emit:
    parts = {name: _part(node, ctx, name) for name in ("sampler", "sigmas")}
    why = [p for p in parts.values() if isinstance(p, str)]
    if why:
        return unsupported_emit(node, f"not the plain case: {'; '.join(why)}")
    sampler, sigmas = parts["sampler"], parts["sigmas"]
    assert isinstance(sampler, ComfyNode) and isinstance(sigmas, ComfyNode)
    return _sampler(
        node,
        ctx,
        noise_on=_enabled(_get(node, "add_noise", True)),
        seed=_get(node, "noise_seed", 0),
        cfg=_get(node, "cfg", 8.0),
        wires={
            "denoiser": node.inputs.get("model"),
            "positive": node.inputs.get("positive"),
            "negative": node.inputs.get("negative"),
            "latent": node.inputs.get("latent_image"),
        },
        sampler=sampler,
        sigmas=sigmas,
    )


def _folded(node: ComfyNode, ctx: MapContext) -> PassThrough:
    # Read by the sampler it feeds (above); it emits no node of its own.
    return PassThrough({})


def _cfg_norm(node: ComfyNode, ctx: MapContext) -> PassThrough:
    # Read by the sampler it feeds (apply_cfg_rule); a CFGNorm no sampler takes is noted there too.
    cfg_norm = (_get(node, "strength", 1.0), _get(node, "pre_cfg", False), node.id)
    return PassThrough({0: "model"}, {"cfg_norm": cfg_norm})


def apply_cfg_rule(
    graph: ComfyGraph,
    sampler: ComfyNode,
    params: dict[str, Any],
    denoiser_call: str | None,
    cfg_norm: tuple[Any, Any, str] | None,
) -> str | None:
    """ComfyUI's guidance rule on an imported sampler of a family whose loop reads `cfg_rule`, with the CFGNorm
    its model comes through (strength, pre_cfg, node id); the id of the CFGNorm applied, if one was."""
    if denoiser_call not in CFG_RULE_LOOPS:
        return None
    strength, pre_cfg, source = cfg_norm if cfg_norm is not None else (None, False, None)
    rule = "ComfyUI's plain CFG, neg + cfg * (pos - neg)"
    if source is None or pre_cfg or not isinstance(strength, int | float):
        source = None  # no CFGNorm, or one of a form not applied here (`note_unapplied_cfg_norms` says so)
        params["cfg_rule"] = "comfyui"
    else:
        params["cfg_rule"], params["cfg_norm"] = "comfyui_cfgnorm", float(strength)
        rule += (
            f", then CFGNorm (node {source}, strength {strength:g}): the guided x0 scaled to at most the "
            "conditional one's norm, times the strength"
        )
    if denoiser_call == "qwenimage":  # Qwen-Image 2.1's pipeline has no rescale: the same sum at cfg > 1
        rule += " (the diffusers pipeline's rule, cfg_rule pipeline, rescales it to the positive's norm)"
    graph.note(sampler, f"cfg_rule {params['cfg_rule']}: {rule}, as ComfyUI runs this graph")
    return source


def note_unapplied_cfg_norms(graph: ComfyGraph, applied: set[str]) -> None:
    """Each CFGNorm no sampler applied (another family, `pre_cfg`, a wired strength, another patch between it
    and the sampler): said, since plain CFG runs without it."""
    for node in graph.nodes.values():
        if node.class_type == "CFGNorm" and node.id not in applied:
            form = (
                "its pre_cfg form"
                if _get(node, "pre_cfg", False)
                else f"strength {_get(node, 'strength', 1.0)}"
            )
            graph.note(
                node,
                f"approximated: CFGNorm ({form}) is not applied; the sampler's own rule runs (Nodeloom applies "
                "CFGNorm's post-CFG form on a Qwen-Image sampler it feeds directly)",
            )


SAMPLING_MAPPERS: dict[str, Mapper] = {
    "SamplerCustomAdvanced": _custom_advanced,
    "SamplerCustom": _custom,
    **dict.fromkeys(_FOLDED, _folded),
    "CFGNorm": _cfg_norm,
}
