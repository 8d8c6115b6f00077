"""Node types that ComfyUI workflows use and Nodeloom's core set lacks: zeroed conditioning, the advanced
(segment) sampler, and image / latent scaling.

Lives here: the node types `ZeroConditioning`, `SamplerAdvanced` (Sampler's shared fields plus its segment
controls), `ImageScale`, `ImageScaleBy`, `LatentUpscale`, `LatentUpscaleBy`, and the `NODES` tuple of their
specs. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`,
`nodes.diffusion` (the sampler fields) and `pipelines.diffusion`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.comfy.canny_node import NODES as CANNY_NODES
from nodes.comfy.edit_nodes import NODES as EDIT_NODES
from nodes.comfy.sampling_nodes import NODES as SAMPLING_NODES
from nodes.comfy.size_nodes import NODES as SIZE_NODES
from nodes.comfy.text_nodes import NODES as TEXT_NODES
from nodes.comfy.value_nodes import NODES as VALUE_NODES
from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, param_like, settings_from, wire
from nodes.diffusion import KSamplerFields
from nodes.kinds import BOOL, CHOICE, FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, IMAGE, LATENT
from pipelines.diffusion.resize import CROP_MODES, UPSCALE_METHODS, resize_image, resize_latent, scaled_size
from pipelines.diffusion.schedulers import K_SCHEDULER_NAMES

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.values import Conditioning, Latents
    from pipelines.steps import Step


@node_type(
    "ZeroConditioning",
    tags=("ConditioningZeroOut",),
    title="Zero Conditioning",
    category="diffusion/conditioning",
    description="All-zero embeddings of the same shape (ComfyUI's ConditioningZeroOut; SD3's negative).",
    outputs=[Output("conditioning", CONDITIONING)],
)
class ZeroConditioning(Node):
    conditioning: Conditioning = wire(CONDITIONING)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        import torch

        cond = self.conditioning
        pooled = None if cond.pooled is None else torch.zeros_like(cond.pooled)
        return {"conditioning": replace(cond, embeds=torch.zeros_like(cond.embeds), pooled=pooled, text="")}


@node_type(
    "SamplerAdvanced",
    tags=("KSamplerAdvanced",),
    title="Sampler (Advanced)",
    category="diffusion",
    description="Run steps [start_step, end_step) of a k-diffusion schedule (ComfyUI's KSamplerAdvanced): "
    "for two-stage (base + refiner) sampling.",
    outputs=[Output("latent", LATENT)],
)
class SamplerAdvanced(KSamplerFields):
    """Sampler's fields, with a required latent, the k_* samplers only and ComfyUI's cfg default (8.0)."""

    latent: Latents = param_like(KSamplerFields, "latent", optional=False)
    scheduler: str = param_like(
        KSamplerFields,
        "scheduler",
        default="k_euler",
        choices=K_SCHEDULER_NAMES,
        help="ComfyUI's KSampler samplers (same picture as ComfyUI for the same seed)",
    )
    cfg: float = param_like(KSamplerFields, "cfg", default=8.0)
    seed: int = param_like(KSamplerFields, "seed", comfy="noise_seed")
    add_noise: bool = param(BOOL, True, help="off: the input latent already has its noise")
    start_step: int = param(INT, 0, min=0, max=10000, comfy="start_at_step")
    end_step: int = param(INT, 10000, min=0, max=10000, comfy="end_at_step")
    leftover_noise: bool = param(BOOL, False, help="on: stop early without denoising fully")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.denoising import sample
        from pipelines.diffusion.previews import latent_preview
        from pipelines.diffusion.sampling import SamplerSettings

        settings = settings_from(SamplerSettings, self, force_full_denoise=not self.leftover_noise)
        family = self.denoiser.family

        def on_step(info: Step) -> None:
            preview = latent_preview(info.latents, family) if info.step == info.total else None
            ctx.progress(info.step, info.total, kind="sampler_step", preview=preview)

        latent = sample(
            ctx.memory, self.denoiser, self.positive, self.negative, self.latent, settings, on_step=on_step
        )
        return {"latent": latent}


def _target_size(height: int, width: int, want_h: int, want_w: int) -> tuple[int, int]:
    """0 on one side keeps the aspect ratio; 0 on both keeps the size."""
    if want_h == 0 and want_w == 0:
        return height, width
    if want_w == 0:
        return want_h, max(1, round(width * want_h / height))
    if want_h == 0:
        return max(1, round(height * want_w / width)), want_w
    return want_h, want_w


_SIDE_HELP = "pixels; 0 keeps the aspect ratio from the other side"


@node_type("ImageScale", title="Scale Image", category="image", outputs=[Output("image", IMAGE)])
class ImageScale(Node):
    image: torch.Tensor = wire(IMAGE)
    method: str = param(CHOICE, "nearest-exact", choices=UPSCALE_METHODS, comfy="upscale_method")
    width: int = param(INT, 512, min=0, max=16384, help=_SIDE_HELP, comfy="width")
    height: int = param(INT, 512, min=0, max=16384, help=_SIDE_HELP, comfy="height")
    crop: str = param(CHOICE, "disabled", choices=CROP_MODES, comfy="crop")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        h, w = _target_size(self.image.shape[1], self.image.shape[2], self.height, self.width)
        return {"image": resize_image(self.image, h, w, self.method, self.crop)}


@node_type("ImageScaleBy", title="Scale Image By", category="image", outputs=[Output("image", IMAGE)])
class ImageScaleBy(Node):
    image: torch.Tensor = wire(IMAGE)
    method: str = param_like(ImageScale, "method")
    scale: float = param(FLOAT, 1.0, min=0.01, max=8.0, step=0.05, comfy="scale_by")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        h, w = scaled_size(self.image.shape[1], self.image.shape[2], self.scale)
        return {"image": resize_image(self.image, h, w, self.method)}


@node_type(
    "LatentUpscale", title="Scale Latent", category="diffusion/latent", outputs=[Output("latent", LATENT)]
)
class LatentUpscale(Node):
    latent: Latents = wire(LATENT)
    method: str = param_like(ImageScale, "method")
    width: int = param_like(ImageScale, "width")
    height: int = param_like(ImageScale, "height")
    crop: str = param_like(ImageScale, "crop")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        latent, f = self.latent, self.latent.vae_scale_factor
        h, w = _target_size(
            latent.samples.shape[-2] * f, latent.samples.shape[-1] * f, self.height, self.width
        )
        samples = resize_latent(latent.samples, max(1, h // f), max(1, w // f), self.method, self.crop)
        return {"latent": replace(latent, samples=samples)}


@node_type(
    "LatentUpscaleBy",
    title="Scale Latent By",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
)
class LatentUpscaleBy(Node):
    latent: Latents = wire(LATENT)
    method: str = param_like(ImageScale, "method")
    scale: float = param_like(ImageScaleBy, "scale", default=1.5)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        samples = self.latent.samples
        h, w = scaled_size(samples.shape[-2], samples.shape[-1], self.scale)
        return {"latent": replace(self.latent, samples=resize_latent(samples, h, w, self.method))}


NODES: tuple[NodeSpec, ...] = (
    *(
        n.spec
        for n in (ZeroConditioning, SamplerAdvanced, ImageScale, ImageScaleBy, LatentUpscale, LatentUpscaleBy)
    ),
    *SIZE_NODES,  # ImageScaleToTotalPixels (nodes/comfy/size_nodes.py)
    *SAMPLING_NODES,  # ModelSamplingShift (nodes/comfy/sampling_nodes.py)
    *TEXT_NODES,  # StringConcatenate, StringReplace (nodes/comfy/text_nodes.py)
    *VALUE_NODES,  # GetImageSize, MathExpression (nodes/comfy/value_nodes.py)
    *EDIT_NODES,  # FluxKontextImageScale (nodes/comfy/edit_nodes.py)
    *CANNY_NODES,  # CannyEdgesComfy (nodes/comfy/canny_node.py)
)
