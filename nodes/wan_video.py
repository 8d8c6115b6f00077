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
output instead: a diffusers folder has the encoder; from ComfyUI's files, the optional `clip_vision_output`
wires bring it, nodes/clip_vision.py). Wan 2.2 TI2V-5B takes its start
image differently, as the first latent frame (`Wan22ImageToVideoLatent`, latent only, as ComfyUI's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, shared_fields, wire
from nodes.kinds import INT
from nodes.spec import NodeSpec, Output
from nodes.types import CLIP_VISION_OUTPUT, CONDITIONING, IMAGE, LATENT, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import Conditioning, VaeRef
    from pipelines.diffusion.wan_image import ClipVisionOutput

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

    def _latent(
        self,
        ctx: NodeContext,
        start: torch.Tensor,
        last: torch.Tensor | None,
        clip: tuple[ClipVisionOutput | None, ...] = (),
    ) -> dict[str, Any]:
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
        given = [c for c in clip if c is not None]
        if (
            given
        ):  # CLIP Vision Encode's pictures and encoder instead of the start/last frame and the folder's
            from dataclasses import replace

            if len(given) != len(clip) or len({id(c.encoder.handle) for c in given}) > 1:
                raise ValueError(
                    "clip vision inputs: give one for each frame, from the same Load CLIP Vision"
                )
            latent = replace(
                latent, clip_images=tuple(c.picture for c in given), clip_encoder=given[0].encoder
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
    clip_vision_output: ClipVisionOutput | None = wire(
        CLIP_VISION_OUTPUT,
        optional=True,
        help="Wan 2.1 I2V from files: the CLIP vision encoder and its picture",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        return self._latent(
            ctx, self.start_image, None, (self.clip_vision_output,) if self.clip_vision_output else ()
        )


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
    clip_vision_start_image: ClipVisionOutput | None = wire(CLIP_VISION_OUTPUT, optional=True)
    clip_vision_end_image: ClipVisionOutput | None = wire(CLIP_VISION_OUTPUT, optional=True)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        clip = (self.clip_vision_start_image, self.clip_vision_end_image)
        return self._latent(ctx, self.start_image, self.end_image, clip if any(clip) else ())


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
