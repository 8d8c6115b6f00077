"""MiniMax H3 video nodes: the prompt and the latent of a text-, first-frame- or first-and-last-frame-to-video
request, shaped like ComfyUI's `MiniMaxH3ImageToVideo`.

Lives here: the node types `MiniMaxH3ImageToVideo`, `MiniMaxH3ReferenceToVideo`, `MiniMaxH3SigmaShift`,
`VAEDecodeAudio`, `REF_IMAGE_INPUTS` and the `NODES` tuple of their specs. Imports `nodes.declare`,
`nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; torch and pipelines.diffusion inside the run
function, so listing node types stays light.

MiniMax H3 shows its keyframes to the text encoder (each labelled `<Picture i>` before the prompt) and packs
them into the sequence as anchors, so one node makes both the conditioning and the latent, as ComfyUI's does
(clip, vae, first_frame, last_frame, prompt, width, height, length -> positive, latent). Without pictures
it is text to video. MiniMax H3 Reference to Video (ComfyUI's `MiniMaxH3ReferenceToVideo`, ref2va) does the same
with up to nine reference pictures at their own sizes (`pipelines.diffusion.minimax_refs`); reference videos
and sounds are not read yet. Frames are snapped up to the VAE's 17n + 5 (1 to 3600, as ComfyUI's node; the model was
trained on 5 to 15 s at 24 fps, 124 to 362 frames).
MiniMax H3 Sigma Shift sets the two schedules' shifts (ComfyUI's node of that name; the folder's are 12 and
3); VAE Decode Audio is the sound track half of VAE Decode Video (ComfyUI's templates decode the frames with
VAE Decode and the sound with it, then Create Video).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, FLOAT, INT, TEXT
from nodes.spec import NodeSpec, Output
from nodes.types import AUDIO, CONDITIONING, DENOISER, IMAGE, LATENT, TEXT_ENCODER, VAE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import DenoiserRef, Latents, TextEncoderRef, VaeRef


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
        INT,
        124,
        min=1,
        max=3600,
        help="rounded up to 17n + 5 at 24 fps (trained on 124 to 362: 5 to 15 s)",
        comfy="length",
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


# The reference pictures' inputs, ComfyUI's Autogrow `ref_images.ref_image_0` ... `ref_image_8` (our 1 to 9).
REF_IMAGE_INPUTS = tuple(f"ref_image_{i}" for i in range(1, 10))


@node_type(
    "MiniMaxH3ReferenceToVideo",
    tags=("MiniMaxH3ReferenceToVideo", "reference to video", "r2v", "ref2va", "video", "audio"),
    title="MiniMax H3 Reference to Video",
    category="diffusion/latent",
    outputs=[Output("positive", CONDITIONING), Output("latent", LATENT)],
    description="A MiniMax H3 prompt and video + sound latent conditioned on reference pictures (ref2va: "
    "cite them as <Picture 1>, <Picture 2>, ... in the prompt, in the order they are wired); runs the "
    "folder's transformer_ref.",
)
class MiniMaxH3ReferenceToVideo(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    vae: VaeRef = wire(VAE)
    audio_vae: VaeRef | None = wire(
        VAE, optional=True, help="ComfyUI's audio VAE input (reference sounds: not read yet)"
    )
    ref_image_1: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 1>")
    ref_image_2: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 2>")
    ref_image_3: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 3>")
    ref_image_4: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 4>")
    ref_image_5: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 5>")
    ref_image_6: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 6>")
    ref_image_7: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 7>")
    ref_image_8: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 8>")
    ref_image_9: torch.Tensor | None = wire(IMAGE, optional=True, help="<Picture 9>")
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True, help="checks the sides fit its patches")
    text: str = param(TEXT, "", help="the prompt, citing <Picture i>", comfy="prompt")
    width: int = param(INT, 1344, min=16, max=8192, step=16, help="pixels", comfy="width")
    height: int = param(INT, 768, min=16, max=8192, step=16, help="pixels", comfy="height")
    frames: int = param(
        INT,
        124,
        min=1,
        max=3600,
        help="rounded up to 17n + 5 at 24 fps (trained on 124 to 362: 5 to 15 s)",
        comfy="length",
    )
    ref_image_size: str = param(
        CHOICE,
        "match",
        choices=("match", "max"),
        help="match: each picture scaled down to the video's pixel area; max: down to a 2048 short edge",
        comfy="ref_image_size",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.minimax_refs import reference_to_video

        for name, ref in (("text_encoder", self.text_encoder), ("vae", self.vae)):
            if ref.family.name != "minimax":
                raise ValueError(
                    f"input '{name}': MiniMax H3 Reference to Video needs MiniMax H3's, got {ref.family.title}'s"
                )
        pictures = [(n, getattr(self, n)) for n in REF_IMAGE_INPUTS if getattr(self, n) is not None]
        positive, latent = reference_to_video(
            ctx.memory,
            self.text_encoder,
            self.vae,
            self.denoiser,
            self.text,
            pictures,
            self.width,
            self.height,
            self.frames,
            self.ref_image_size,
        )
        return {"positive": positive, "latent": latent}


@node_type(
    "MiniMaxH3SigmaShift",
    tags=("MiniMaxH3SigmaShift", "shift", "schedule"),
    title="MiniMax H3 Sigma Shift",
    category="diffusion/model",
    outputs=[Output("denoiser", DENOISER)],
    description="The shifts of MiniMax H3's video and audio schedules (the folder's: 12 and 3).",
)
class MiniMaxH3SigmaShift(Node):
    denoiser: DenoiserRef = wire(DENOISER)
    shift_video: float = param(FLOAT, 12.0, min=0.01, max=100.0, step=0.01, comfy="shift_video")
    shift_audio: float = param(FLOAT, 3.0, min=0.01, max=100.0, step=0.01, comfy="shift_audio")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from dataclasses import replace

        from pipelines.diffusion.minimax_layout import AUDIO_SCHEDULER_KEY

        if self.denoiser.family.name != "minimax":
            raise ValueError(
                f"input 'denoiser': MiniMax H3 Sigma Shift needs a MiniMax H3 model, got {self.denoiser.family.title}"
            )
        config = dict(self.denoiser.scheduler_config)
        audio = {**config.get(AUDIO_SCHEDULER_KEY, {}), "shift": float(self.shift_audio)}
        config.update(shift=float(self.shift_video), **{AUDIO_SCHEDULER_KEY: audio})
        return {"denoiser": replace(self.denoiser, scheduler_config=config)}


@node_type(
    "VAEDecodeAudio",
    tags=("VAEDecodeAudio", "audio", "sound"),
    title="VAE Decode Audio",
    category="diffusion/latent",
    outputs=[Output("audio", AUDIO)],
    description="A MiniMax H3 latent's stereo sound track -> AUDIO, with its folder's audio VAE.",
)
class VAEDecodeAudio(Node):
    vae: VaeRef = wire(VAE, help="the model's VAE (its folder's audio VAE decodes)")
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        if self.latent.audio is None or self.vae.audio is None:
            raise ValueError(
                "input 'latent': no sound track to decode (a MiniMax H3 latent, with the VAE of its folder)"
            )
        if self.vae.family.name == "minimax":
            from pipelines.diffusion.minimax_vae import decode_minimax_audio

            return {"audio": decode_minimax_audio(ctx.memory, self.vae.audio, self.latent.audio)}
        raise ValueError(
            f"input 'vae': VAE Decode Audio decodes MiniMax H3's sound, not {self.vae.family.title}'s"
        )


NODES: tuple[NodeSpec, ...] = (
    MiniMaxH3ImageToVideo.spec,
    MiniMaxH3ReferenceToVideo.spec,
    MiniMaxH3SigmaShift.spec,
    VAEDecodeAudio.spec,
)
