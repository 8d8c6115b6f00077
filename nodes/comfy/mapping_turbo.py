"""ComfyUI's SDTurboScheduler folded onto our Sampler's "simple" schedule where the two pick the same noise levels.

Lives here: `turbo_mappers`, `turbo_timesteps`, `simple_equivalent`. Imports `nodes.comfy.graph`,
`nodes.comfy.mapping` (helpers), `nodes.comfy.mapping_sampling` (the plain sampler build) and
`nodes.comfy.family_check` (a model file's family); no torch.

SDTurboScheduler (comfy_extras/nodes_custom_sampler.py) gives SD-Turbo / SDXL-Turbo the ten timesteps they were
distilled at: start = 10 - int(10 * denoise), then timesteps 999, 899, ..., 99 from index start, `steps` of them,
each turned into its sigma by the model's table, and a final 0. ComfyUI's "simple" schedule over T steps picks
timesteps 999 - int(x * 1000 / T), and a KSampler denoise d below 1 builds int(steps / d) of them and keeps the
last steps + 1 sigmas. Where some T and step count give exactly the turbo timesteps (the stock template's one step
at full denoise is T = 1; any run ending at timestep 99 is T = 10), the SamplerCustom / SamplerCustomAdvanced
becomes our Sampler with schedule "simple", those steps and that denoise: the same sigmas from the same table.
Only for a 1000-step discrete (SD / SDXL) model, whose table that is; any other case stays unsupported.
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.family_check import family_of_name
from nodes.comfy.graph import ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, PassThrough, _enabled, _get, unsupported_emit
from nodes.comfy.mapping_sampling import _sampler

_TRAIN_STEPS = 1000  # SD / SDXL's discrete schedule: timesteps 0..999
_DISCRETE_FAMILIES = ("sd", "sdxl")


def turbo_timesteps(steps: int, denoise: float) -> list[int]:
    """SDTurboScheduler's timesteps (before their sigmas and the final 0)."""
    start = 10 - int(10 * denoise)
    return [999 - 100 * k for k in range(10)][start : start + steps]


def _simple_tail(total: int, n: int) -> list[int]:
    """The last n of the T timesteps ComfyUI's "simple" schedule picks: sigmas[-(1 + int(x * 1000 / T))]."""
    stride = _TRAIN_STEPS / total
    return [_TRAIN_STEPS - 1 - int(x * stride) for x in range(total - n, total)]


def simple_equivalent(steps: int, denoise: float) -> tuple[int, float] | None:
    """(steps, denoise) for a "simple" KSampler giving the turbo timesteps, or None when none does."""
    wanted = turbo_timesteps(steps, denoise)
    n = len(wanted)
    if n == 0:
        return None
    for total in range(n, _TRAIN_STEPS + 1):
        # two or more turbo timesteps are 100 apart, which "simple" steps are only for T near 10 (1000 / T)
        if n > 1 and not 9 <= total <= 11:
            continue
        if _simple_tail(total, n) != wanted:
            continue
        if total == n:
            return n, 1.0
        d = n / total
        if int(n / d) == total and d <= 0.9999:  # the sampler rebuilds int(steps / denoise) steps
            return n, d
    return None


def _model_file(node: ComfyNode, ctx: MapContext) -> Any:
    """The checkpoint / UNET file behind the scheduler's `model` input (through model patches)."""
    link = node.inputs.get("model")
    for _ in range(16):
        source = ctx.graph.nodes.get(link.node) if isinstance(link, LinkRef) else None
        if source is None:
            return None
        for widget in ("ckpt_name", "unet_name"):
            if widget in source.inputs:
                return source.inputs[widget]
        link = source.inputs.get("model")
    return None


def _plain(turbo: ComfyNode, ctx: MapContext) -> ComfyNode | str:
    """A "simple" BasicScheduler standing for the turbo one, or why there is none."""
    steps, denoise = _get(turbo, "steps", 1), _get(turbo, "denoise", 1.0)
    if not isinstance(steps, int) or not isinstance(denoise, int | float):
        return "SDTurboScheduler's steps / denoise are wired (only constants are folded)"
    family = family_of_name(_model_file(turbo, ctx))
    if family not in _DISCRETE_FAMILIES:
        return f"SDTurboScheduler on a model of family {family!r} (SD / SDXL's discrete schedule only)"
    found = simple_equivalent(steps, float(denoise))
    if found is None:
        return f"SDTurboScheduler steps {steps} denoise {denoise}: no 'simple' schedule picks those timesteps"
    n, d = found
    inputs = {"scheduler": "simple", "steps": n, "denoise": d, "model": turbo.inputs.get("model")}
    return ComfyNode(turbo.id, "BasicScheduler", inputs)


def _source(node: ComfyNode, ctx: MapContext, name: str, classes: tuple[str, ...]) -> ComfyNode | None:
    link = node.inputs.get(name)
    source = ctx.graph.nodes.get(link.node) if isinstance(link, LinkRef) else None
    return source if source is not None and source.class_type in classes else None


def _with_turbo(earlier: Mapper, advanced: bool) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Emit | Any:
        turbo = _source(node, ctx, "sigmas", ("SDTurboScheduler",))
        if turbo is None:
            return earlier(node, ctx)
        sigmas = _plain(turbo, ctx)
        sampler = _source(node, ctx, "sampler", ("KSamplerSelect",))
        if isinstance(sigmas, str):
            return unsupported_emit(node, sigmas)
        if sampler is None:
            return unsupported_emit(node, "its sampler is not a KSamplerSelect")
        ctx.graph.note(
            node,
            f"SDTurboScheduler: the same timesteps as schedule 'simple', {sigmas.inputs['steps']} step(s) at "
            f"denoise {sigmas.inputs['denoise']:g}",
        )
        if not advanced:
            seed, cfg = _get(node, "noise_seed", 0), _get(node, "cfg", 8.0)
            noise_on = _enabled(_get(node, "add_noise", True))
            wires = {k: node.inputs.get(k) for k in ("model", "positive", "negative")}
        else:
            noise = _source(node, ctx, "noise", ("RandomNoise", "DisableNoise"))
            guider = _source(node, ctx, "guider", ("CFGGuider",))
            if noise is None or guider is None:
                return unsupported_emit(
                    node, "with SDTurboScheduler, RandomNoise/DisableNoise and CFGGuider map here"
                )
            seed, cfg = _get(noise, "noise_seed", 0), _get(guider, "cfg", 8.0)
            noise_on = noise.class_type == "RandomNoise"
            wires = {k: guider.inputs.get(k) for k in ("model", "positive", "negative")}
        if noise_on is False and sigmas.inputs["denoise"] < 1.0:
            # without added noise the Sampler (Advanced) runs the whole schedule, not its tail
            return unsupported_emit(
                node, "SDTurboScheduler below full denoise with the noise off is not mapped"
            )
        return _sampler(
            node,
            ctx,
            noise_on=noise_on,
            seed=seed,
            cfg=cfg,
            wires={
                "denoiser": wires["model"],
                "positive": wires["positive"],
                "negative": wires["negative"],
                "latent": node.inputs.get("latent_image"),
            },
            sampler=sampler,
            sigmas=sigmas,
        )

    return mapper


def _scheduler(node: ComfyNode, ctx: MapContext) -> PassThrough | Emit:
    plain = _plain(node, ctx)
    if isinstance(plain, str):
        return unsupported_emit(node, plain)
    return PassThrough({})  # read by the sampler it feeds (above); it emits no node of its own


def turbo_mappers(earlier: dict[str, Mapper]) -> dict[str, Mapper]:
    """SDTurboScheduler and the two custom samplers over `earlier`, which they delegate to otherwise."""
    return {
        "SDTurboScheduler": _scheduler,
        "SamplerCustom": _with_turbo(earlier["SamplerCustom"], advanced=False),
        "SamplerCustomAdvanced": _with_turbo(earlier["SamplerCustomAdvanced"], advanced=True),
    }
