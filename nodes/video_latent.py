"""Video diffusion nodes: an empty video latent sized from the model, and a VAE decode that makes a VIDEO.

Lives here: the node types `EmptyVideoLatent`, `VAEDecodeVideo` and the `NODES` tuple of their specs. Imports
`nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`, `pipelines.diffusion.tiling` (names
only); torch and pipelines.diffusion /
pipelines.video inside the run functions, so listing node types stays light.

The latent is (1, C, latent frames, h, w): channels, pixels per latent and frames per latent frame come from
the VAE's config (`z_dim`, `scale_factor_spatial`, `scale_factor_temporal`: Wan's 16, 8 and 4; tiny fixtures
differ), and the picture sides must also fit the transformer's 2x2 patches when a denoiser is wired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER, LATENT, VAE, VIDEO
from pipelines.diffusion.tiling import TILING_CHOICES

if TYPE_CHECKING:
    from pipelines.diffusion.values import DenoiserRef, Latents, VaeRef

WAN_FPS = 16.0  # Wan 2.1/2.2 T2V's frame rate (the diffusers examples export at 16 fps)


@node_type(
    "EmptyVideoLatent",
    tags=("EmptyHunyuanLatentVideo", "EmptyWanLatentVideo", "video"),
    title="Empty Video Latent",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="An empty (frames, h, w) latent for a video model, sized from its VAE.",
)
class EmptyVideoLatent(Node):
    vae: VaeRef = wire(VAE)
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True, help="checks the sides fit its patches")
    width: int = param(INT, 832, min=16, max=8192, step=16, help="pixels", comfy="width")
    height: int = param(INT, 480, min=16, max=8192, step=16, help="pixels", comfy="height")
    frames: int = param(INT, 81, min=1, max=4096, help="1 + 4k for Wan (the VAE's time step)", comfy="length")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        import torch

        from pipelines.diffusion.values import Latents
        from pipelines.diffusion.video_vae import video_latent_shape

        if self.vae.family.name == "ltx2":
            from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent

            return {
                "latent": empty_ltx2_latent(self.vae, self.denoiser, self.width, self.height, self.frames)
            }
        if (
            self.vae.family.name == "minimax"
        ):  # with the stereo sound track's latent, frames snapped to 17n + 5
            from pipelines.diffusion.minimax_vae import empty_minimax_latent

            return {
                "latent": empty_minimax_latent(self.vae, self.denoiser, self.width, self.height, self.frames)
            }
        config = self.vae.config
        scale = self.vae.scale_factor
        multiple = scale
        if self.denoiser is not None:
            patch = self.denoiser.config.get("patch_size", (1, 2, 2))
            multiple = scale * int(patch[-1] if isinstance(patch, (list, tuple)) else patch)
        if self.width % multiple or self.height % multiple:
            raise ValueError(
                f"fields 'width', 'height': must be multiples of {multiple} for this model, got "
                f"{self.width}x{self.height}"
            )
        shape = video_latent_shape(config, self.width, self.height, self.frames)
        return {"latent": Latents(samples=torch.zeros(shape), vae_scale_factor=scale, source="empty")}


@node_type(
    "VAEDecodeVideo",
    tags=("video", "frames"),
    title="VAE Decode Video",
    category="diffusion/latent",
    outputs=[Output("video", VIDEO)],
    description="Video latents -> a VIDEO (frames at a frame rate; LTX-2: with its sound track), decoded by a "
    "video VAE (Wan, LTX-2).",
)
class VAEDecodeVideo(Node):
    vae: VaeRef = wire(VAE)
    latent: Latents = wire(LATENT)
    fps: float = param(FLOAT, WAN_FPS, min=0.01, max=1000.0, step=1.0, help="frames per second")
    tiling: str = param(
        CHOICE,
        "auto",
        choices=TILING_CHOICES,
        help="auto: chunks of frames, then spatial tiles, only when the memory manager predicts a whole decode "
        "won't fit; on: spatial tiles; off: whole",
    )
    tile_size: int = param(
        INT, 0, min=0, max=8192, step=32, help="spatial tile side in pixels; 0 = largest that fits"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.video_tiling import decode_video_planned, video_plan_for
        from pipelines.video.value import Video

        if self.vae.family.name == "ltx2":  # frames and the sound track (its own decode: no tiling plan yet)
            from pipelines.diffusion.ltx2_nodes import decode_ltx2

            video = decode_ltx2(ctx.memory, self.vae, self.latent, float(self.fps))
            ctx.metric("video_frames", float(video.count))
            return {"video": video}
        if self.vae.family.name == "minimax":  # frames and the stereo sound track (no tiling plan yet)
            from pipelines.diffusion.minimax_vae import decode_minimax

            video = decode_minimax(ctx.memory, self.vae, self.latent, float(self.fps))
            ctx.metric("video_frames", float(video.count))
            return {"video": video}
        plan = video_plan_for(ctx.memory, self.vae, self.latent, tiling=self.tiling, tile_px=self.tile_size)
        ctx.metric("vae_tiled", 0.0 if plan.mode == "full" else 1.0)
        ctx.metric("vae_full_bytes", plan.full_bytes)
        ctx.metric("vae_available_bytes", plan.available)
        if plan.mode != "full":
            ctx.metric("vae_tile_px", plan.tile_px)
            ctx.metric("vae_frame_chunk", plan.chunk)
            what = (
                f"{plan.chunk} latent frames at a time"
                if plan.mode == "temporal"
                else f"{plan.tile_px}px tiles"
            )
            ctx.log(
                f"{plan.mode} video decode, {what} ({plan.reason}: whole decode {plan.full_bytes / 2**20:.0f} MiB, "
                f"available {plan.available / 2**20:.0f} MiB)"
            )
        frames = decode_video_planned(ctx.memory, self.vae, self.latent, plan)
        ctx.metric("video_frames", float(frames.shape[0]))
        return {"video": Video(frames, float(self.fps))}


NODES: tuple[NodeSpec, ...] = (EmptyVideoLatent.spec, VAEDecodeVideo.spec)
