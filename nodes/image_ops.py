"""Node types for images, masks and latents that need no model, plus tiled VAE passes.

Lives here: `NODES` (LoadUpscaleModel, UpscaleImage, ImageInvert, CannyEdges, ImageToLineart, MaskInvert, MaskGrow, MaskFeather,
SetLatentNoiseMask, InpaintConditioning, VAEDecodeTiled, VAEEncodeTiled).
May import: nodes.*, pipelines.* (torch-heavy ones inside the run functions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import CONDITIONING, IMAGE, LATENT, MASK, UPSCALE_MODEL, VAE
from pipelines.diffusion.tiling import TILING_CHOICES

if TYPE_CHECKING:  # torch-heavy: each run function imports what it uses, so listing node types stays light
    import torch

    from pipelines.diffusion.tiled_vae import TilePlan
    from pipelines.diffusion.values import Conditioning, Latents, VaeRef
    from pipelines.image.upscale import UpscaleModelRef


def _run_invert(ctx: NodeContext, image: torch.Tensor) -> dict[str, Any]:
    from pipelines.image import ops

    return {"image": ops.invert(image)}


def _run_canny(ctx: NodeContext, image: torch.Tensor, low: int, high: int) -> dict[str, Any]:
    from pipelines.image import ops

    if low > high:
        raise ValueError(f"field 'low': {low} is above 'high' ({high})")
    return {"image": ops.canny(image, low, high)}


def _run_lineart(ctx: NodeContext, image: torch.Tensor, threshold: float, dark_lines: bool) -> dict[str, Any]:
    from pipelines.image import ops

    return {"image": ops.lineart(image, threshold, dark_lines)}


def _run_mask_invert(ctx: NodeContext, mask: torch.Tensor) -> dict[str, Any]:
    from pipelines.image import ops

    return {"mask": ops.mask_invert(mask)}


def _run_mask_grow(ctx: NodeContext, mask: torch.Tensor, pixels: int) -> dict[str, Any]:
    from pipelines.image import ops

    return {"mask": ops.mask_grow(mask, pixels)}


def _run_mask_feather(ctx: NodeContext, mask: torch.Tensor, radius: int) -> dict[str, Any]:
    from pipelines.image import ops

    return {"mask": ops.mask_feather(mask, radius)}


def _run_noise_mask(ctx: NodeContext, latent: Latents, mask: torch.Tensor) -> dict[str, Any]:
    from pipelines.diffusion.latent_ops import latent_noise_mask

    return {"latent": latent_noise_mask(latent, mask)}


def _run_inpaint_conditioning(
    ctx: NodeContext,
    positive: Conditioning,
    negative: Conditioning | None,
    vae: VaeRef,
    image: torch.Tensor,
    mask: torch.Tensor,
    noise_mask: bool,
) -> dict[str, Any]:
    from pipelines.diffusion.inpaint import inpaint_latents

    latent = inpaint_latents(ctx.memory, vae, image, mask, noise_mask=noise_mask)
    return {"positive": positive, "negative": negative, "latent": latent}


def _run_load_upscale_model(ctx: NodeContext, path: str) -> dict[str, Any]:
    from pipelines.image.upscale import load_upscale_model
    from pipelines.paths import resolve_model_path

    if not path:
        raise ValueError("field 'path': choose an upscale model file (.safetensors)")
    file = resolve_model_path(path)
    loaded = load_upscale_model(ctx.memory, file, allow_pickle=ctx.allow_pickle)
    return {"upscale_model": loaded}


def _run_upscale_image(
    ctx: NodeContext, upscale_model: UpscaleModelRef, image: torch.Tensor, tile: int, overlap: int
) -> dict[str, Any]:
    from pipelines.image.upscale import upscale_image

    if overlap * 2 > tile:
        raise ValueError(f"field 'overlap': {overlap} must be at most half the tile ({tile})")
    result, used = upscale_image(ctx.memory, upscale_model, image, tile=tile, overlap=overlap)
    ctx.metric("upscale_tile_px", used)
    if used < tile:
        ctx.log(f"ran out of memory at {tile}px tiles; finished with {used}px tiles")
    return {"image": result}


def _report_plan(ctx: NodeContext, plan: TilePlan) -> None:
    # The report's per-node metrics say whether the pass was tiled and why; the log line says it in words.
    ctx.metric("vae_tiled", 1.0 if plan.tiled else 0.0)
    ctx.metric("vae_full_bytes", plan.full_bytes)
    ctx.metric("vae_available_bytes", plan.available)
    if plan.tiled:
        ctx.metric("vae_tile_px", plan.tile_px)
        ctx.log(
            f"tiled VAE pass, {plan.tile_px}px tiles ({plan.reason}: full pass {plan.full_bytes / 2**20:.0f} MiB, "
            f"available {plan.available / 2**20:.0f} MiB)"
        )


def _run_decode_tiled(
    ctx: NodeContext, vae: VaeRef, latent: Latents, tiling: str, tile_size: int
) -> dict[str, Any]:
    from pipelines.diffusion.tiled_vae import decode_tiled, plan_decode
    from pipelines.diffusion.vae import decode

    plan = plan_decode(ctx.memory, vae, latent, tiling, tile_size)
    _report_plan(ctx, plan)
    image = decode_tiled(ctx.memory, vae, latent, plan) if plan.tiled else decode(ctx.memory, vae, latent)
    return {"image": image}


def _run_encode_tiled(
    ctx: NodeContext, vae: VaeRef, image: torch.Tensor, tiling: str, tile_size: int
) -> dict[str, Any]:
    from pipelines.diffusion.tiled_vae import encode_tiled, plan_encode
    from pipelines.diffusion.vae import encode

    plan = plan_encode(ctx.memory, vae, image, tiling, tile_size)
    _report_plan(ctx, plan)
    latent = encode_tiled(ctx.memory, vae, image, plan) if plan.tiled else encode(ctx.memory, vae, image)
    return {"latent": latent}


_TILING_PARAMS = [
    Param(
        "tiling",
        "choice",
        default="auto",
        choices=TILING_CHOICES,
        help="auto: tile only when the memory manager predicts a full pass won't fit the budget",
    ),
    Param(
        "tile_size",
        "int",
        default=0,
        min=0,
        max=8192,
        step=64,
        help="tile side in pixels; 0 = largest that fits",
    ),
]

NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="LoadUpscaleModel",
        title="Load Upscale Model",
        category="image/upscale",
        params=[Param("path", "path", default="", file_filter="Upscale models (*.safetensors)")],
        outputs=[Output("upscale_model", UPSCALE_MODEL)],
        run=_run_load_upscale_model,
        description="An ESRGAN-family upscaler (read by spandrel: pip install 'nodeloom[upscale]').",
        tags=("upscale", "esrgan", "realesrgan", "UpscaleModelLoader"),
    ),
    NodeSpec(
        type="UpscaleImage",
        title="Upscale Image (Model)",
        category="image/upscale",
        inputs=[Input("upscale_model", UPSCALE_MODEL), Input("image", IMAGE)],
        params=[
            Param(
                "tile",
                "int",
                default=512,
                min=32,
                max=4096,
                step=32,
                help="tile side; halves on out-of-memory",
            ),
            Param("overlap", "int", default=32, min=0, max=512, step=8),
        ],
        outputs=[Output("image", IMAGE)],
        run=_run_upscale_image,
        description="Upscale with a model, in overlapping tiles that shrink when memory runs out.",
        tags=("upscale", "esrgan", "ImageUpscaleWithModel"),
    ),
    NodeSpec(
        type="ImageInvert",
        title="Invert Image",
        category="image",
        inputs=[Input("image", IMAGE)],
        outputs=[Output("image", IMAGE)],
        run=_run_invert,
        description="Negative of the picture (1 - value).",
    ),
    NodeSpec(
        type="CannyEdges",
        title="Canny Edges",
        category="image/preprocess",
        inputs=[Input("image", IMAGE)],
        params=[
            Param(
                "low",
                "int",
                default=100,
                min=0,
                max=1000,
                help="lower hysteresis threshold (0-255 gradients)",
            ),
            Param("high", "int", default=200, min=0, max=1000, help="upper hysteresis threshold"),
        ],
        outputs=[Output("image", IMAGE)],
        run=_run_canny,
        description="White edges on black (OpenCV Canny): the control picture for Canny ControlNets.",
    ),
    NodeSpec(
        type="ImageToLineart",
        title="Image to Line Art",
        category="image/preprocess",
        inputs=[Input("image", IMAGE)],
        params=[
            Param("threshold", "float", default=0.5, min=0.0, max=1.0, step=0.05),
            Param("dark_lines", "bool", default=True, help="on: dark pixels are the lines"),
        ],
        outputs=[Output("image", IMAGE)],
        run=_run_lineart,
        description="Threshold the luminance into white lines on black.",
    ),
    NodeSpec(
        type="MaskInvert",
        title="Invert Mask",
        category="mask",
        inputs=[Input("mask", MASK)],
        outputs=[Output("mask", MASK)],
        run=_run_mask_invert,
    ),
    NodeSpec(
        type="MaskGrow",
        title="Grow Mask",
        category="mask",
        inputs=[Input("mask", MASK)],
        params=[Param("pixels", "int", default=8, min=-256, max=256, help="negative shrinks")],
        outputs=[Output("mask", MASK)],
        run=_run_mask_grow,
    ),
    NodeSpec(
        type="MaskFeather",
        title="Feather Mask",
        category="mask",
        inputs=[Input("mask", MASK)],
        params=[Param("radius", "int", default=4, min=0, max=256, help="blur radius in pixels")],
        outputs=[Output("mask", MASK)],
        run=_run_mask_feather,
    ),
    NodeSpec(
        type="SetLatentNoiseMask",
        title="Set Latent Noise Mask",
        category="diffusion/latent",
        inputs=[Input("latent", LATENT), Input("mask", MASK)],
        outputs=[Output("latent", LATENT)],
        run=_run_noise_mask,
        description="Inpaint with an ordinary model: the sampler repaints only where the mask is 1.",
    ),
    NodeSpec(
        type="InpaintConditioning",
        title="Inpaint Conditioning",
        category="diffusion/latent",
        inputs=[
            Input("positive", CONDITIONING),
            Input("negative", CONDITIONING, optional=True),
            Input("vae", VAE),
            Input("image", IMAGE),
            Input("mask", MASK),
        ],
        params=[
            Param(
                "noise_mask",
                "bool",
                default=True,
                help="also keep the unmasked latents at every step (off: the model alone decides, as diffusers)",
            )
        ],
        outputs=[
            Output("positive", CONDITIONING),
            Output("negative", CONDITIONING),
            Output("latent", LATENT),
        ],
        run=_run_inpaint_conditioning,
        description="For inpainting models (9-channel UNets): the picture, the mask and the masked picture.",
        tags=("inpaint", "inpainting", "mask", "InpaintModelConditioning"),
    ),
    NodeSpec(
        type="VAEDecodeTiled",
        title="VAE Decode (Tiled)",
        category="diffusion/latent",
        inputs=[Input("vae", VAE), Input("latent", LATENT)],
        params=list(_TILING_PARAMS),
        outputs=[Output("image", IMAGE)],
        run=_run_decode_tiled,
        description="Decode in tiles when the whole picture would not fit the memory budget.",
    ),
    NodeSpec(
        type="VAEEncodeTiled",
        title="VAE Encode (Tiled)",
        category="diffusion/latent",
        inputs=[Input("vae", VAE), Input("image", IMAGE)],
        params=list(_TILING_PARAMS),
        outputs=[Output("latent", LATENT)],
        run=_run_encode_tiled,
        description="Encode in tiles when the whole picture would not fit the memory budget.",
    ),
)
