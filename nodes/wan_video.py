"""Wan image-to-video nodes: a start frame (or a first and a last frame) -> the conditioning a Wan I2V model
denoises from.

Lives here: the node types `WanImageToVideo`, `WanFirstLastFrameToVideo`, `Wan22ImageToVideoLatent` and the
`NODES` tuple of their specs.
Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; torch and
pipelines.diffusion inside the run functions, so listing node types stays light.

Shaped like ComfyUI's nodes of the same names (positive, negative, vae, width, height, length, batch_size ->
positive, negative, latent). The prompts pass through unchanged; the start/last frames travel on the latent
wire (`pipelines.diffusion.wan_image`), which is where the sampler reads them, and Wan 2.1 I2V's CLIP image
states are made by the sampler with the model folder's own image encoder (ComfyUI wires a CLIP Vision Encode
output instead: not needed here, the encoder is part of the diffusers folder). Wan 2.2 TI2V-5B takes its start
image differently, as the first latent frame (`Wan22ImageToVideoLatent`, latent only, as ComfyUI's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, shared_fields, wire
from nodes.kinds import INT
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, IMAGE, LATENT, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import Conditioning, VaeRef

_OUTPUTS = [Output("positive", CONDITIONING), Output("negative", CONDITIONING), Output("latent", LATENT)]


@shared_fields
class _WanVideoFields(Node):
    """The fields both Wan image-to-video nodes share (ComfyUI's order)."""

    positive: Conditioning = wire(CONDITIONING)
    negative: Conditioning | None = wire(CONDITIONING, optional=True)
    vae: VaeRef = wire(VAE)
    width: int = param(INT, 832, min=16, max=8192, step=16, help="pixels", comfy="width")
    height: int = param(INT, 480, min=16, max=8192, step=16, help="pixels", comfy="height")
    length: int = param(
        INT, 81, min=1, max=4096, help="frames: 1 + 4k for Wan (the VAE's time step)", comfy="length"
    )
    batch_size: int = param(INT, 1, min=1, max=64, help="videos per run", comfy="batch_size")

    def _latent(self, ctx: NodeContext, start: torch.Tensor, last: torch.Tensor | None) -> dict[str, Any]:
        from pipelines.diffusion.wan_image import wan_image_latents

        scale = self.vae.scale_factor
        if self.width % scale or self.height % scale:
            raise ValueError(
                f"fields 'width', 'height': must be multiples of {scale} for this VAE, got {self.width}x{self.height}"
            )
        latent = wan_image_latents(
            ctx.memory,
            self.vae,
            start,
            width=self.width,
            height=self.height,
            frames=self.length,
            batch=self.batch_size,
            last=last,
        )
        return {"positive": self.positive, "negative": self.negative, "latent": latent}


@node_type(
    "WanImageToVideo",
    tags=("image to video", "i2v", "video", "start image"),
    title="Wan Image To Video",
    category="diffusion/latent",
    outputs=_OUTPUTS,
    description="A start image -> the latent a Wan image-to-video model continues into a video.",
)
class WanImageToVideo(_WanVideoFields):
    start_image: torch.Tensor = wire(IMAGE, help="the video's first frame (resized to width x height)")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return self._latent(ctx, self.start_image, None)


@node_type(
    "WanFirstLastFrameToVideo",
    tags=("first last frame", "flf2v", "video", "end image"),
    title="Wan First Last Frame To Video",
    category="diffusion/latent",
    outputs=_OUTPUTS,
    description="A first and a last image -> the latent a Wan image-to-video model fills in between.",
)
class WanFirstLastFrameToVideo(_WanVideoFields):
    start_image: torch.Tensor = wire(IMAGE, help="the video's first frame (resized to width x height)")
    end_image: torch.Tensor = wire(IMAGE, help="the video's last frame (resized to width x height)")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return self._latent(ctx, self.start_image, self.end_image)


@node_type(
    "Wan22ImageToVideoLatent",
    tags=("ti2v", "wan 2.2", "image to video", "video"),
    title="Wan 2.2 Image To Video Latent",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="Wan 2.2 TI2V-5B's latent: empty (text to video), or with a start image as its first frame.",
)
class Wan22ImageToVideoLatent(Node):
    vae: VaeRef = wire(VAE)
    start_image: torch.Tensor | None = wire(
        IMAGE, optional=True, help="the video's first frame (resized to width x height); none: text to video"
    )
    width: int = param(INT, 1280, min=32, max=8192, step=32, help="pixels", comfy="width")
    height: int = param(INT, 704, min=32, max=8192, step=32, help="pixels", comfy="height")
    length: int = param(
        INT, 49, min=1, max=4096, help="frames: 1 + 4k for Wan (the VAE's time step)", comfy="length"
    )
    batch_size: int = param(INT, 1, min=1, max=64, help="videos per run", comfy="batch_size")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.wan_image import wan22_image_latent

        scale = self.vae.scale_factor
        if self.width % scale or self.height % scale:
            raise ValueError(
                f"fields 'width', 'height': must be multiples of {scale} for this VAE, got {self.width}x{self.height}"
            )
        latent = wan22_image_latent(
            ctx.memory,
            self.vae,
            self.start_image,
            width=self.width,
            height=self.height,
            frames=self.length,
            batch=self.batch_size,
        )
        return {"latent": latent}


NODES: tuple[NodeSpec, ...] = (
    WanImageToVideo.spec,
    WanFirstLastFrameToVideo.spec,
    Wan22ImageToVideoLatent.spec,
)
