"""Qwen-Image 2.1 node types, shaped like ComfyUI's: one prompt pair encoded with the pictures it edits, and the
KV-cache switch its templates put on the model.

Lives here: the node types TextEncodeQwenImage21 (prompt, negative prompt and 0-3 pictures -> positive,
negative and an empty latent of the output size) and QwenImage21Cache (a pass-through: the loop always caches
the prefix's keys and values), and the `NODES` tuple of their specs. May import: nodes.*, pipelines.* (torch-heavy
code only inside `run`).

As ComfyUI's TextEncodeQwenImage21: `clip` is our `text_encoder` wire, `vae` (optional) makes the pictures'
reference latents, `resolution` is the pipeline's `output_resolution` (each picture, and the output, is
resized to about resolution x resolution pixels at its own aspect, sides multiples of 32; 0 keeps a picture's
own area). Both prompts read the same pictures and share their references, as `QwenImage21Pipeline` does.
The resizing follows diffusers' pipeline (PIL Lanczos), the reference this is checked against.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, INT, TEXT
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT, TEXT_ENCODER, VAE

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.values import DenoiserRef, TextEncoderRef, VaeRef

_RESOLUTION_HELP = (
    "side of the square each picture's area is resized to (and the output's, at the last picture's aspect); "
    "0 keeps each picture's own area"
)
_LATENT_CHANNELS = 64  # the released VAE's z_dim, for a latent made without a VAE wired
_SCALE = 16  # the released VAE's pixels per latent


@node_type(
    "TextEncodeQwenImage21",
    title="Text Encode (Qwen-Image 2.1)",
    category="diffusion/conditioning",
    outputs=[
        Output("positive", CONDITIONING),
        Output("negative", CONDITIONING),
        Output("latent", LATENT),
    ],
    description="A prompt and a negative prompt read by Qwen3-VL together with up to three pictures (Qwen-Image "
    "2.1 and its Edit use); with a VAE wired the pictures' latents become references the sampler edits from. "
    "The latent is an empty one of the output size (the last picture's aspect at about resolution^2 pixels).",
    tags=("edit", "TextEncodeQwenImage21"),
)
class TextEncodeQwenImage21(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    prompt: str = param(TEXT, "", help="the prompt or edit instruction", comfy="prompt")
    negative_prompt: str = param(
        TEXT, "", help="what to steer away from (used when cfg > 1)", comfy="negative_prompt"
    )
    resolution: int = param(INT, 1024, min=0, max=4096, step=32, help=_RESOLUTION_HELP, comfy="resolution")
    vae: VaeRef | None = wire(VAE, optional=True, help="makes the pictures' reference latents")
    image1: torch.Tensor | None = wire(IMAGE, optional=True)
    image2: torch.Tensor | None = wire(IMAGE, optional=True)
    image3: torch.Tensor | None = wire(IMAGE, optional=True)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        import torch

        from pipelines.diffusion.qwenimage21_text import encode_qwenimage21, output_size
        from pipelines.diffusion.values import Latents

        ref = self.text_encoder
        if ref.family.name != "qwenimage21":
            raise ValueError(
                f"field 'text_encoder': {ref.family.title} is not a Qwen-Image 2.1 model (load a Qwen-Image 2.1 folder)"
            )
        images = [i for i in (self.image1, self.image2, self.image3) if i is not None]
        common = dict(resolution=self.resolution)
        positive = encode_qwenimage21(ctx.memory, ref, self.prompt, images, vae=self.vae, **common)
        # The same pictures for the negative prompt; their references are the positive's (the pipeline's)
        negative = encode_qwenimage21(ctx.memory, ref, self.negative_prompt, images, vae=None, **common)
        negative = replace(negative, references=positive.references)

        side = self.resolution or 1024
        width, height = output_size(side, side, side)
        if images:
            last = images[-1]
            width, height = output_size(int(last.shape[2]), int(last.shape[1]), self.resolution)
        channels, scale = _LATENT_CHANNELS, _SCALE
        if self.vae is not None:
            channels, scale = self.vae.latent_channels, self.vae.scale_factor
        samples = torch.zeros(1, channels, height // scale, width // scale)
        latent = Latents(samples=samples, vae_scale_factor=scale, source="empty")
        return {"positive": positive, "negative": negative, "latent": latent}


@node_type(
    "QwenImage21Cache",
    title="Qwen-Image 2.1 KV Cache",
    category="diffusion/models",
    outputs=[Output("denoiser", DENOISER)],
    description="ComfyUI's switch for caching the prompt's keys and values across steps. Nodeloom's Qwen-Image "
    "2.1 loop always does (as the diffusers pipeline's default), so the model passes through unchanged.",
    tags=("QwenImage21Cache",),
)
class QwenImage21Cache(Node):
    denoiser: DenoiserRef = wire(DENOISER)
    device: str = param(CHOICE, "auto", choices=("auto", "cpu", "gpu"), help="where ComfyUI keeps the cache")
    dtype: str = param(CHOICE, "default", choices=("default",), help="the cache's dtype (the model's)")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        if self.denoiser.family.name != "qwenimage21":
            raise ValueError(
                f"field 'denoiser': {self.denoiser.family.title} is not a Qwen-Image 2.1 model (the cache is its own)"
            )
        return {"denoiser": self.denoiser}


NODES: tuple[NodeSpec, ...] = (TextEncodeQwenImage21.spec, QwenImage21Cache.spec)
