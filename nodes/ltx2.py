"""LTX-2 video nodes: the first-frame image-to-video latent, shaped like ComfyUI's `LTXVImgToVideo`.

Lives here: the node types `EmptyLTXVLatentVideo`, `LTXVImageToVideo` and the `NODES` tuple of their specs. Imports `nodes.declare`,
`nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; torch and pipelines.diffusion inside the run
function, so listing node types stays light.

With a video VAE that has no audio VAE beside it (ComfyUI's split files) Empty LTXV Latent Video makes the
video latent alone, for LTXV Concat AV Latent to join with an Empty LTXV Audio Latent (nodes/ltx2_latents.py).
The text-to-video latent is the Empty Video Latent (it sizes the sound track's latent too when the VAE is an
LTX-2 one, for the pipeline's 24 fps) or Empty LTXV Latent Video (the same, at any frame rate); LTXV Image to
Video makes the same pair with the picture encoded as the first latent frame, which the sampler keeps
(`LTX2ImageToVideoPipeline`). The frame rate travels in the latent: it sizes the sound track and conditions
the transformer's positions (the pipeline's `frame_rate`). Unlike ComfyUI's node it does not pass the prompts through
(our conditionings carry nothing frame-related) and has no `strength` (the pipeline keeps the frame whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER, IMAGE, LATENT, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import DenoiserRef, VaeRef


def _check_vae(vae: VaeRef, title: str) -> None:
    if vae.family.name != "ltx2":
        raise ValueError(f"input 'vae': {title} needs an LTX-2 VAE, got {vae.family.title}'s")


@node_type(
    "EmptyLTXVLatentVideo",
    tags=("EmptyLTXVLatentVideo", "video", "audio"),
    title="Empty LTXV Latent Video",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="An empty LTX-2 video latent and its sound track's, sized from the VAEs for a frame rate.",
)
class EmptyLTXVLatentVideo(Node):
    vae: VaeRef = wire(VAE)
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True, help="checks the sides fit its patches")
    width: int = param(INT, 768, min=32, max=8192, step=32, help="pixels", comfy="width")
    height: int = param(INT, 512, min=32, max=8192, step=32, help="pixels", comfy="height")
    frames: int = param(
        INT, 121, min=1, max=4096, help="1 + 8k for LTX-2 (the VAE's time step)", comfy="length"
    )
    fps: float = param(
        FLOAT, 24.0, min=1.0, max=240.0, step=1.0, help="frame rate the motion and sound are made for"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent

        _check_vae(self.vae, "Empty LTXV Latent Video")
        if self.vae.audio is None:  # a video VAE alone (ComfyUI's split files): the sound latent comes apart
            from pipelines.diffusion.ltx2_comfy import empty_video_latent

            return {
                "latent": empty_video_latent(self.vae, self.width, self.height, self.frames, float(self.fps))
            }
        latent = empty_ltx2_latent(
            self.vae, self.denoiser, self.width, self.height, self.frames, float(self.fps)
        )
        return {"latent": latent}


@node_type(
    "LTXVImageToVideo",
    tags=("LTXVImgToVideo", "image to video", "i2v", "video"),
    title="LTXV Image to Video",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="An LTX-2 video latent (with its sound track's) whose first frame is the picture, encoded by the VAE.",
)
class LTXVImageToVideo(Node):
    vae: VaeRef = wire(VAE)
    image: torch.Tensor = wire(IMAGE, help="the first frame (resized to width x height)")
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True, help="checks the sides fit its patches")
    width: int = param(INT, 768, min=32, max=8192, step=32, help="pixels", comfy="width")
    height: int = param(INT, 512, min=32, max=8192, step=32, help="pixels", comfy="height")
    frames: int = param(
        INT, 121, min=1, max=4096, help="1 + 8k for LTX-2 (the VAE's time step)", comfy="length"
    )
    fps: float = param(
        FLOAT, 24.0, min=1.0, max=240.0, step=1.0, help="frame rate the motion and sound are made for"
    )
    crf: int = param(
        INT, 33, min=0, max=51, help="H.264 re-compression of the picture, as trained (0 = none)"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_nodes import image_ltx2_latent

        if self.vae.family.name != "ltx2":
            raise ValueError(
                f"input 'vae': LTXV Image to Video needs an LTX-2 VAE, got {self.vae.family.title}'s"
            )
        latent = image_ltx2_latent(
            ctx.memory,
            self.vae,
            self.denoiser,
            self.image,
            self.width,
            self.height,
            self.frames,
            float(self.fps),
            int(self.crf),
        )
        return {"latent": latent}


NODES: tuple[NodeSpec, ...] = (EmptyLTXVLatentVideo.spec, LTXVImageToVideo.spec)
