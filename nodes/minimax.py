"""MiniMax H3 video nodes: the prompt and the latent of a text-, first-frame- or first-and-last-frame-to-video
request, shaped like ComfyUI's `MiniMaxH3ImageToVideo`.

Lives here: the node type `MiniMaxH3ImageToVideo` and the `NODES` tuple of its spec. Imports `nodes.declare`,
`nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; torch and pipelines.diffusion inside the run
function, so listing node types stays light.

MiniMax H3 shows its keyframes to the text encoder (each labelled `<Picture i>` before the prompt) and packs
them into the sequence as anchors, so one node makes both the conditioning and the latent, as ComfyUI's does
(clip, vae, first_frame, last_frame, prompt, width, height, length -> positive, latent). Without pictures
it is text to video. Frames are snapped up to the VAE's 17n + 5 and must make 5 to 15 s at 24 fps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import INT, TEXT
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT, TEXT_ENCODER, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import DenoiserRef, TextEncoderRef, VaeRef


@node_type(
    "MiniMaxH3ImageToVideo",
    tags=("MiniMaxH3ImageToVideo", "image to video", "i2v", "video", "audio"),
    title="MiniMax H3 Image to Video",
    category="diffusion/latent",
    outputs=[Output("positive", CONDITIONING), Output("latent", LATENT)],
    description="A MiniMax H3 prompt and video + sound latent, from text and optionally a first and/or last "
    "frame (shown to the text encoder and kept as anchors).",
)
class MiniMaxH3ImageToVideo(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    vae: VaeRef = wire(VAE)
    first_frame: torch.Tensor | None = wire(IMAGE, optional=True, help="the video starts from it")
    last_frame: torch.Tensor | None = wire(IMAGE, optional=True, help="the video ends on it")
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True, help="checks the sides fit its patches")
    text: str = param(TEXT, "", help="the prompt (MiniMax H3 takes no negative prompt)", comfy="prompt")
    width: int = param(INT, 1344, min=16, max=8192, step=16, help="pixels", comfy="width")
    height: int = param(INT, 768, min=16, max=8192, step=16, help="pixels", comfy="height")
    frames: int = param(
        INT, 124, min=1, max=4096, help="17n + 5, 5 to 15 s at 24 fps (rounded up)", comfy="length"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.minimax_vae import image_to_video

        for name, ref in (("text_encoder", self.text_encoder), ("vae", self.vae)):
            if ref.family.name != "minimax":
                raise ValueError(
                    f"input '{name}': MiniMax H3 Image to Video needs MiniMax H3's, got {ref.family.title}'s"
                )
        positive, latent = image_to_video(
            ctx.memory,
            self.text_encoder,
            self.vae,
            self.denoiser,
            self.text,
            self.first_frame,
            self.last_frame,
            self.width,
            self.height,
            self.frames,
        )
        return {"positive": positive, "latent": latent}


NODES: tuple[NodeSpec, ...] = (MiniMaxH3ImageToVideo.spec,)
