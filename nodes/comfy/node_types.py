"""Node types that ComfyUI workflows use and Nodeloom's core set lacks: zeroed conditioning, the advanced
(segment) sampler, and image / latent scaling.

Lives here: the `NODES` tuple. Imports `nodes.spec`, `nodes.types`, `nodes.context`, `nodes.diffusion`'s
sampler helpers and `pipelines.diffusion`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.diffusion import SEED_MAX
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT
from pipelines.diffusion.resize import CROP_MODES, UPSCALE_METHODS, resize_image, resize_latent, scaled_size
from pipelines.diffusion.schedulers import K_SCHEDULER_NAMES, SIGMA_SCHEDULES

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
    from pipelines.steps import Step


def _run_zero_conditioning(ctx: NodeContext, conditioning: Conditioning) -> dict[str, Any]:
    import torch

    pooled = None if conditioning.pooled is None else torch.zeros_like(conditioning.pooled)
    zeroed = replace(conditioning, embeds=torch.zeros_like(conditioning.embeds), pooled=pooled, text="")
    return {"conditioning": zeroed}


def _run_sampler_advanced(
    ctx: NodeContext,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latent: Latents,
    add_noise: bool,
    seed: int,
    steps: int,
    cfg: float,
    scheduler: str,
    sigma_schedule: str,
    start_step: int,
    end_step: int,
    leftover_noise: bool,
) -> dict[str, Any]:
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.previews import latent_preview
    from pipelines.diffusion.sampling import SamplerSettings

    settings = SamplerSettings(
        scheduler=scheduler,
        sigma_schedule=sigma_schedule,
        steps=steps,
        cfg=cfg,
        seed=seed,
        start_step=start_step,
        end_step=end_step,
        add_noise=add_noise,
        force_full_denoise=not leftover_noise,
    )

    def on_step(info: Step) -> None:
        preview = latent_preview(info.latents, denoiser.family) if info.step == info.total else None
        ctx.progress(info.step, info.total, kind="sampler_step", preview=preview)

    return {"latent": sample(ctx.memory, denoiser, positive, negative, latent, settings, on_step=on_step)}


def _target_size(height: int, width: int, want_h: int, want_w: int) -> tuple[int, int]:
    """0 on one side keeps the aspect ratio; 0 on both keeps the size."""
    if want_h == 0 and want_w == 0:
        return height, width
    if want_w == 0:
        return want_h, max(1, round(width * want_h / height))
    if want_h == 0:
        return max(1, round(height * want_w / width)), want_w
    return want_h, want_w


def _run_image_scale(
    ctx: NodeContext, image: torch.Tensor, method: str, width: int, height: int, crop: str
) -> dict[str, Any]:
    h, w = _target_size(image.shape[1], image.shape[2], height, width)
    return {"image": resize_image(image, h, w, method, crop)}


def _run_image_scale_by(ctx: NodeContext, image: torch.Tensor, method: str, scale: float) -> dict[str, Any]:
    h, w = scaled_size(image.shape[1], image.shape[2], scale)
    return {"image": resize_image(image, h, w, method)}


def _run_latent_upscale(
    ctx: NodeContext, latent: Latents, method: str, width: int, height: int, crop: str
) -> dict[str, Any]:
    f = latent.vae_scale_factor
    h, w = _target_size(latent.samples.shape[-2] * f, latent.samples.shape[-1] * f, height, width)
    samples = resize_latent(latent.samples, max(1, h // f), max(1, w // f), method, crop)
    return {"latent": replace(latent, samples=samples)}


def _run_latent_upscale_by(ctx: NodeContext, latent: Latents, method: str, scale: float) -> dict[str, Any]:
    h, w = scaled_size(latent.samples.shape[-2], latent.samples.shape[-1], scale)
    return {"latent": replace(latent, samples=resize_latent(latent.samples, h, w, method))}


_METHOD = Param("method", "choice", default="nearest-exact", choices=UPSCALE_METHODS)
_CROP = Param("crop", "choice", default="disabled", choices=CROP_MODES)
_SIDE_HELP = "pixels; 0 keeps the aspect ratio from the other side"

NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="ZeroConditioning",
        tags=("ConditioningZeroOut",),
        title="Zero Conditioning",
        category="diffusion/conditioning",
        description="All-zero embeddings of the same shape (ComfyUI's ConditioningZeroOut; SD3's negative).",
        inputs=[Input("conditioning", CONDITIONING)],
        outputs=[Output("conditioning", CONDITIONING)],
        run=_run_zero_conditioning,
    ),
    NodeSpec(
        type="SamplerAdvanced",
        tags=("KSamplerAdvanced",),
        title="Sampler (Advanced)",
        category="diffusion",
        description="Run steps [start_step, end_step) of a k-diffusion schedule (ComfyUI's KSamplerAdvanced): "
        "for two-stage (base + refiner) sampling.",
        inputs=[
            Input("denoiser", DENOISER),
            Input("positive", CONDITIONING),
            Input("negative", CONDITIONING, optional=True),
            Input("latent", LATENT),
        ],
        params=[
            Param("add_noise", "bool", default=True, help="off: the input latent already has its noise"),
            Param("seed", "seed", default=42, min=0, max=SEED_MAX),
            Param("steps", "int", default=20, min=1, max=1000),
            Param("cfg", "float", default=8.0, min=0.0, max=100.0, step=0.5),
            Param("scheduler", "choice", default="k_euler", choices=K_SCHEDULER_NAMES),
            Param("sigma_schedule", "choice", default="normal", choices=SIGMA_SCHEDULES),
            Param("start_step", "int", default=0, min=0, max=10000),
            Param("end_step", "int", default=10000, min=0, max=10000),
            Param("leftover_noise", "bool", default=False, help="on: stop early without denoising fully"),
        ],
        outputs=[Output("latent", LATENT)],
        run=_run_sampler_advanced,
    ),
    NodeSpec(
        type="ImageScale",
        title="Scale Image",
        category="image",
        inputs=[Input("image", IMAGE)],
        params=[
            _METHOD,
            Param("width", "int", default=512, min=0, max=16384, help=_SIDE_HELP),
            Param("height", "int", default=512, min=0, max=16384, help=_SIDE_HELP),
            _CROP,
        ],
        outputs=[Output("image", IMAGE)],
        run=_run_image_scale,
    ),
    NodeSpec(
        type="ImageScaleBy",
        title="Scale Image By",
        category="image",
        inputs=[Input("image", IMAGE)],
        params=[_METHOD, Param("scale", "float", default=1.0, min=0.01, max=8.0, step=0.05)],
        outputs=[Output("image", IMAGE)],
        run=_run_image_scale_by,
    ),
    NodeSpec(
        type="LatentUpscale",
        title="Scale Latent",
        category="diffusion/latent",
        inputs=[Input("latent", LATENT)],
        params=[
            _METHOD,
            Param("width", "int", default=512, min=0, max=16384, help=_SIDE_HELP),
            Param("height", "int", default=512, min=0, max=16384, help=_SIDE_HELP),
            _CROP,
        ],
        outputs=[Output("latent", LATENT)],
        run=_run_latent_upscale,
    ),
    NodeSpec(
        type="LatentUpscaleBy",
        title="Scale Latent By",
        category="diffusion/latent",
        inputs=[Input("latent", LATENT)],
        params=[_METHOD, Param("scale", "float", default=1.5, min=0.01, max=8.0, step=0.05)],
        outputs=[Output("latent", LATENT)],
        run=_run_latent_upscale_by,
    ),
)
