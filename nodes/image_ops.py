"""Node types for images, masks and latents that need no model, plus tiled VAE passes.

Lives here: the node types LoadUpscaleModel, UpscaleImage, ImageInvert, CannyEdges, ImageToLineart, MaskInvert,
MaskGrow, MaskFeather, SetLatentNoiseMask, InpaintConditioning, VAEDecodeTiled, VAEEncodeTiled (their tiling
fields shared in `TilingFields`), and the `NODES` tuple of their specs.
May import: nodes.*, pipelines.* (torch-heavy ones inside the run functions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, shared_fields, wire
from nodes.kinds import BOOL, CHOICE, FLOAT, INT, PATH
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, IMAGE, LATENT, MASK, UPSCALE_MODEL, VAE
from pipelines.diffusion.tiling import TILING_CHOICES

if TYPE_CHECKING:  # torch-heavy: each run function imports what it uses, so listing node types stays light
    import torch

    from pipelines.diffusion.tiled_vae import TilePlan
    from pipelines.diffusion.values import Conditioning, Latents, VaeRef
    from pipelines.image.upscale import UpscaleModelRef


@node_type(
    "LoadUpscaleModel",
    title="Load Upscale Model",
    category="image/upscale",
    outputs=[Output("upscale_model", UPSCALE_MODEL)],
    description="An upscale model: ESRGAN / Real-ESRGAN files read natively, others by spandrel (pip install 'nodeloom[upscale]').",
    tags=("upscale", "esrgan", "realesrgan", "UpscaleModelLoader"),
)
class LoadUpscaleModel(Node):
    path: str = param(PATH, "", file_filter="Upscale models (*.safetensors)", comfy="model_name")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image.upscale import load_upscale_model
        from pipelines.paths import resolve_model_path

        if not self.path:
            raise ValueError("field 'path': choose an upscale model file (.safetensors)")
        file = resolve_model_path(self.path)
        loaded = load_upscale_model(ctx.memory, file, allow_pickle=ctx.allow_pickle)
        return {"upscale_model": loaded}


@node_type(
    "UpscaleImage",
    title="Upscale Image (Model)",
    category="image/upscale",
    outputs=[Output("image", IMAGE)],
    description="Upscale with a model, in overlapping tiles that shrink when memory runs out.",
    tags=("upscale", "esrgan", "ImageUpscaleWithModel"),
)
class UpscaleImage(Node):
    upscale_model: UpscaleModelRef = wire(UPSCALE_MODEL)
    image: torch.Tensor = wire(IMAGE)
    tile: int = param(INT, 512, min=32, max=4096, step=32, help="tile side; halves on out-of-memory")
    overlap: int = param(INT, 32, min=0, max=512, step=8)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image.upscale import upscale_image

        tile, overlap = self.tile, self.overlap
        if overlap * 2 > tile:
            raise ValueError(f"field 'overlap': {overlap} must be at most half the tile ({tile})")
        result, used = upscale_image(ctx.memory, self.upscale_model, self.image, tile=tile, overlap=overlap)
        ctx.metric("upscale_tile_px", used)
        if used < tile:
            ctx.log(f"ran out of memory at {tile}px tiles; finished with {used}px tiles")
        return {"image": result}


@node_type(
    "ImageInvert",
    title="Invert Image",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="Negative of the picture (1 - value).",
)
class ImageInvert(Node):
    image: torch.Tensor = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        return {"image": ops.invert(self.image)}


@node_type(
    "CannyEdges",
    title="Canny Edges",
    category="image/preprocess",
    outputs=[Output("image", IMAGE)],
    description="White edges on black (OpenCV Canny): the control picture for Canny ControlNets.",
)
class CannyEdges(Node):
    image: torch.Tensor = wire(IMAGE)
    low: int = param(INT, 100, min=0, max=1000, help="lower hysteresis threshold (0-255 gradients)")
    high: int = param(INT, 200, min=0, max=1000, help="upper hysteresis threshold")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        if self.low > self.high:
            raise ValueError(f"field 'low': {self.low} is above 'high' ({self.high})")
        return {"image": ops.canny(self.image, self.low, self.high)}


@node_type(
    "ImageToLineart",
    title="Image to Line Art",
    category="image/preprocess",
    outputs=[Output("image", IMAGE)],
    description="Threshold the luminance into white lines on black.",
)
class ImageToLineart(Node):
    image: torch.Tensor = wire(IMAGE)
    threshold: float = param(FLOAT, 0.5, min=0.0, max=1.0, step=0.05)
    dark_lines: bool = param(BOOL, True, help="on: dark pixels are the lines")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        return {"image": ops.lineart(self.image, self.threshold, self.dark_lines)}


@node_type("MaskInvert", title="Invert Mask", category="mask", outputs=[Output("mask", MASK)])
class MaskInvert(Node):
    mask: torch.Tensor = wire(MASK)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        return {"mask": ops.mask_invert(self.mask)}


@node_type("MaskGrow", title="Grow Mask", category="mask", outputs=[Output("mask", MASK)])
class MaskGrow(Node):
    mask: torch.Tensor = wire(MASK)
    pixels: int = param(INT, 8, min=-256, max=256, help="negative shrinks")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        return {"mask": ops.mask_grow(self.mask, self.pixels)}


@node_type("MaskFeather", title="Feather Mask", category="mask", outputs=[Output("mask", MASK)])
class MaskFeather(Node):
    mask: torch.Tensor = wire(MASK)
    radius: int = param(INT, 4, min=0, max=256, help="blur radius in pixels")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.image import ops

        return {"mask": ops.mask_feather(self.mask, self.radius)}


@node_type(
    "SetLatentNoiseMask",
    title="Set Latent Noise Mask",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="Inpaint with an ordinary model: the sampler repaints only where the mask is 1.",
)
class SetLatentNoiseMask(Node):
    latent: Latents = wire(LATENT)
    mask: torch.Tensor = wire(MASK)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.latent_ops import latent_noise_mask

        return {"latent": latent_noise_mask(self.latent, self.mask)}


@node_type(
    "InpaintConditioning",
    title="Inpaint Conditioning",
    category="diffusion/latent",
    outputs=[Output("positive", CONDITIONING), Output("negative", CONDITIONING), Output("latent", LATENT)],
    description="For inpainting models (9-channel UNets): the picture, the mask and the masked picture.",
    tags=("inpaint", "inpainting", "mask", "InpaintModelConditioning"),
)
class InpaintConditioning(Node):
    positive: Conditioning = wire(CONDITIONING)
    negative: Conditioning | None = wire(CONDITIONING, optional=True)
    vae: VaeRef = wire(VAE)
    image: torch.Tensor = wire(IMAGE)
    mask: torch.Tensor = wire(MASK)
    noise_mask: bool = param(
        BOOL,
        True,
        help="also keep the unmasked latents at every step (off: the model alone decides, as diffusers)",
        comfy="noise_mask",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.inpaint import inpaint_latents

        latent = inpaint_latents(ctx.memory, self.vae, self.image, self.mask, noise_mask=self.noise_mask)
        return {"positive": self.positive, "negative": self.negative, "latent": latent}


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


@shared_fields
class TilingFields(Node):
    """The tiling controls VAEDecodeTiled and VAEEncodeTiled share."""

    tiling: str = param(
        CHOICE,
        "auto",
        choices=TILING_CHOICES,
        help="auto: tile only when the memory manager predicts a full pass won't fit the budget",
    )
    tile_size: int = param(
        INT, 0, min=0, max=8192, step=64, help="tile side in pixels; 0 = largest that fits"
    )


@node_type(
    "VAEDecodeTiled",
    title="VAE Decode (Tiled)",
    category="diffusion/latent",
    outputs=[Output("image", IMAGE)],
    description="Decode in tiles when the whole picture would not fit the memory budget.",
)
class VAEDecodeTiled(TilingFields):
    vae: VaeRef = wire(VAE)
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.tiled_vae import decode_tiled, plan_decode
        from pipelines.diffusion.vae import decode

        vae, latent = self.vae, self.latent
        plan = plan_decode(ctx.memory, vae, latent, self.tiling, self.tile_size)
        _report_plan(ctx, plan)
        image = decode_tiled(ctx.memory, vae, latent, plan) if plan.tiled else decode(ctx.memory, vae, latent)
        return {"image": image}


@node_type(
    "VAEEncodeTiled",
    title="VAE Encode (Tiled)",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="Encode in tiles when the whole picture would not fit the memory budget.",
)
class VAEEncodeTiled(TilingFields):
    vae: VaeRef = wire(VAE)
    image: torch.Tensor = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.tiled_vae import encode_tiled, plan_encode
        from pipelines.diffusion.vae import encode

        vae, image = self.vae, self.image
        plan = plan_encode(ctx.memory, vae, image, self.tiling, self.tile_size)
        _report_plan(ctx, plan)
        latent = encode_tiled(ctx.memory, vae, image, plan) if plan.tiled else encode(ctx.memory, vae, image)
        return {"latent": latent}


NODES: tuple[NodeSpec, ...] = tuple(
    n.spec
    for n in (
        LoadUpscaleModel,
        UpscaleImage,
        ImageInvert,
        CannyEdges,
        ImageToLineart,
        MaskInvert,
        MaskGrow,
        MaskFeather,
        SetLatentNoiseMask,
        InpaintConditioning,
        VAEDecodeTiled,
        VAEEncodeTiled,
    )
)
