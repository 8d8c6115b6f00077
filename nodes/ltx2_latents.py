"""ComfyUI's separate LTX-2 latent nodes as Nodeloom node types: video-only and audio-only latents, joining and
splitting them, the audio decode, the picture pre-compression and the in-place first frame.

Lives here: the node types `LTXVEmptyLatentAudio`, `LTXVConcatAVLatent`,
`LTXVSeparateAVLatent`, `LTXVAudioVAEDecode`, `LTXVPreprocess`, `LTXVImgToVideoInplace` and `NODES`. Imports
`nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; torch and
`pipelines.diffusion.ltx2_comfy` (what they do) inside the run functions, so listing node types stays light.

How the two latents travel in one `Latents` value: `pipelines/diffusion/ltx2_comfy.py`. Our Empty LTXV Latent
Video / LTXV Image to Video (nodes/ltx2.py) make the joined latent in one node (the video latent alone from a
video VAE without its audio VAE); these are the other steps as ComfyUI's templates write them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import BOOL, FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import AUDIO, IMAGE, LATENT, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import Latents, VaeRef

_FPS_HELP = "frame rate the motion and sound are made for (it conditions the transformer's positions)"


def _ltx2_vae(vae: VaeRef, title: str) -> VaeRef:
    if vae.family.name != "ltx2":
        raise ValueError(f"input 'vae': {title} needs an LTX-2 VAE, got {vae.family.title}'s")
    return vae


@node_type(
    "LTXVEmptyLatentAudio",
    tags=("LTXVEmptyLatentAudio", "audio", "LTX-2"),
    title="Empty LTXV Audio Latent",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="An empty LTX-2 sound-track latent for a number of video frames at a frame rate.",
)
class LTXVEmptyLatentAudio(Node):
    vae: VaeRef = wire(VAE, help="LTX-2's VAE with its audio VAE")
    frames: int = param(INT, 97, min=1, max=4096, help="video frames the sound lasts", comfy="frames_number")
    fps: float = param(FLOAT, 25.0, min=1.0, max=240.0, step=1.0, help=_FPS_HELP, comfy="frame_rate")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import empty_audio_latent

        vae = _ltx2_vae(self.vae, "Empty LTXV Audio Latent")
        return {"latent": empty_audio_latent(vae, self.frames, float(self.fps))}


@node_type(
    "LTXVConcatAVLatent",
    tags=("LTXVConcatAVLatent", "LTX-2"),
    title="LTXV Concat AV Latent",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="Joins an LTX-2 video latent and a sound-track latent, for a sampler to denoise together.",
)
class LTXVConcatAVLatent(Node):
    video_latent: Latents = wire(LATENT)
    audio_latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import concat_av

        return {"latent": concat_av(self.video_latent, self.audio_latent)}


@node_type(
    "LTXVSeparateAVLatent",
    tags=("LTXVSeparateAVLatent", "LTX-2"),
    title="LTXV Separate AV Latent",
    category="diffusion/latent",
    outputs=[Output("video_latent", LATENT), Output("audio_latent", LATENT)],
    description="Splits an LTX-2 audio-video latent into its video latent and its sound-track latent.",
)
class LTXVSeparateAVLatent(Node):
    av_latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import separate_av

        video, audio = separate_av(self.av_latent)
        return {"video_latent": video, "audio_latent": audio}


@node_type(
    "LTXVAudioVAEDecode",
    tags=("LTXVAudioVAEDecode", "audio", "LTX-2"),
    title="LTXV Audio VAE Decode",
    category="diffusion/latent",
    outputs=[Output("audio", AUDIO)],
    description="An LTX-2 sound-track latent -> AUDIO (audio VAE, then vocoder).",
)
class LTXVAudioVAEDecode(Node):
    vae: VaeRef = wire(VAE, help="LTX-2's VAE with its audio VAE")
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import decode_audio_latent

        vae = _ltx2_vae(self.vae, "LTXV Audio VAE Decode")
        return {"audio": decode_audio_latent(ctx.memory, vae, self.latent)}


@node_type(
    "LTXVPreprocess",
    tags=("LTXVPreprocess", "LTX-2", "crf"),
    title="LTXV Preprocess",
    category="image",
    outputs=[Output("image", IMAGE)],
    description="Re-compresses pictures with H.264 at a CRF, the compression LTX-2's conditioning frames had.",
)
class LTXVPreprocess(Node):
    image: torch.Tensor = wire(IMAGE)
    img_compression: int = param(
        INT, 35, min=0, max=100, help="H.264 CRF (0 = none)", comfy="img_compression"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import preprocess_images

        return {"image": preprocess_images(self.image, int(self.img_compression))}


@node_type(
    "LTXVImgToVideoInplace",
    tags=("LTXVImgToVideoInplace", "image to video", "LTX-2"),
    title="LTXV Image to Video (in place)",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="The latent with its first frame replaced by the picture, encoded by the VAE and kept by the "
    "sampler.",
)
class LTXVImgToVideoInplace(Node):
    vae: VaeRef = wire(VAE)
    image: torch.Tensor = wire(IMAGE, help="the first frame (resized to the latent's size)")
    latent: Latents = wire(LATENT)
    strength: float = param(
        FLOAT, 1.0, min=0.0, max=1.0, step=0.01, help="1: the frame kept whole", comfy="strength"
    )
    bypass: bool = param(BOOL, False, help="pass the latent through unchanged", comfy="bypass")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_comfy import image_in_place

        if self.bypass:
            return {"latent": self.latent}
        vae = _ltx2_vae(self.vae, "LTXV Image to Video (in place)")
        return {"latent": image_in_place(ctx.memory, vae, self.image, self.latent, float(self.strength))}


NODES: tuple[NodeSpec, ...] = tuple(
    n.spec
    for n in (
        LTXVEmptyLatentAudio,
        LTXVConcatAVLatent,
        LTXVSeparateAVLatent,
        LTXVAudioVAEDecode,
        LTXVPreprocess,
        LTXVImgToVideoInplace,
    )
)
