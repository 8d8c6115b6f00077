"""Qwen-Image-Edit node types: a prompt encoded with the pictures it edits, shaped like ComfyUI's nodes.

Lives here: the node types TextEncodeQwenImageEdit (one picture: the first Qwen-Image-Edit release) and
TextEncodeQwenImageEditPlus (1-3 pictures: Edit 2509/2511), and the `NODES` tuple of their specs. May
import: nodes.*, pipelines.* (torch-heavy code only inside `run`).

As ComfyUI's nodes of the same names (comfy_extras/nodes_qwen.py): `clip` is our `text_encoder` wire, `prompt`
the text, `vae` (optional) makes the pictures' reference latents, `image` / `image1..3` the pictures. The
resizing follows diffusers' pipelines, the reference this is checked against (about 1024 x 1024 px for the
VAE, sides multiples of 32; 384 x 384 px for Qwen2.5-VL in Plus), which differs from ComfyUI's (multiples
of 8, area interpolation); `vae_pixels` / `vl_pixels` are those areas. On Krea 2's Qwen3-VL (ComfyUI's
style-reference template) the Plus node follows ComfyUI itself, which is the only reference there
(pipelines/diffusion/krea2_pictures.py); its pictures are optional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import INT, TEXT
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, IMAGE, TEXT_ENCODER, VAE

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.values import TextEncoderRef, VaeRef

_VAE_HELP = "pixels each picture is resized to for the VAE reference (the pipelines' 1024 x 1024)"
_VL_HELP = "pixels each picture is resized to for Qwen2.5-VL (the Plus pipeline's 384 x 384)"
_AREA = dict(min=32 * 32, max=4096 * 4096)


def _encode(
    ctx: NodeContext,
    text_encoder: TextEncoderRef,
    text: str,
    vae: VaeRef | None,
    images: list[torch.Tensor],
    *,
    plus: bool,
    vae_pixels: int,
    vl_pixels: int,
) -> dict[str, Any]:
    from pipelines.diffusion.qwenimage_edit_text import encode_qwenimage_edit

    if plus and text_encoder.family.name == "krea2":  # ComfyUI's style-reference template on Krea 2
        from pipelines.diffusion.krea2_pictures import encode_krea2_pictures

        cond = encode_krea2_pictures(
            ctx.memory, text_encoder, text, images, vae=vae, vl_area=vl_pixels, vae_area=vae_pixels
        )
        return {"conditioning": cond}
    if text_encoder.family.name != "qwenimage_edit":
        raise ValueError(
            f"field 'text_encoder': {text_encoder.family.title} is not a Qwen-Image-Edit model "
            "(load a Qwen-Image-Edit folder, or Krea 2 for the Plus node)"
        )
    if not images:
        raise ValueError("field 'image': wire at least one picture to edit")
    cond = encode_qwenimage_edit(
        ctx.memory,
        text_encoder,
        text,
        images,
        vae=vae,
        plus=plus,
        vae_area=vae_pixels,
        vl_area=vl_pixels,
    )
    return {"conditioning": cond}


@node_type(
    "TextEncodeQwenImageEdit",
    title="Text Encode (Qwen-Image-Edit)",
    category="diffusion/conditioning",
    outputs=[Output("conditioning", CONDITIONING)],
    description="An edit instruction read by Qwen2.5-VL together with the picture (the first Qwen-Image-Edit "
    "release); with a VAE wired the picture's latents become the reference the sampler edits from.",
    tags=("edit", "TextEncodeQwenImageEdit"),
)
class TextEncodeQwenImageEdit(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    prompt: str = param(TEXT, "", help="the edit instruction", comfy="prompt")
    vae: VaeRef | None = wire(VAE, optional=True, help="makes the picture's reference latents")
    image: torch.Tensor | None = wire(IMAGE, optional=True)
    vae_pixels: int = param(INT, 1024 * 1024, help=_VAE_HELP, **_AREA)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        images = [] if self.image is None else [self.image]
        return _encode(
            ctx,
            self.text_encoder,
            self.prompt,
            self.vae,
            images,
            plus=False,
            vae_pixels=self.vae_pixels,
            vl_pixels=self.vae_pixels,
        )


@node_type(
    "TextEncodeQwenImageEditPlus",
    title="Text Encode (Qwen-Image-Edit Plus)",
    category="diffusion/conditioning",
    outputs=[Output("conditioning", CONDITIONING)],
    description="An edit instruction read by Qwen2.5-VL with up to three pictures ('Picture 1: ...', Qwen-Image-"
    "Edit 2509/2511; or Krea 2's Qwen3-VL, as ComfyUI's style-reference template reads its picture); with a VAE "
    "wired every picture's latents become references the sampler edits from.",
    tags=("edit", "TextEncodeQwenImageEditPlus"),
)
class TextEncodeQwenImageEditPlus(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    prompt: str = param(TEXT, "", help="the edit instruction", comfy="prompt")
    vae: VaeRef | None = wire(VAE, optional=True, help="makes the pictures' reference latents")
    image1: torch.Tensor | None = wire(IMAGE, optional=True)
    image2: torch.Tensor | None = wire(IMAGE, optional=True)
    image3: torch.Tensor | None = wire(IMAGE, optional=True)
    vae_pixels: int = param(INT, 1024 * 1024, help=_VAE_HELP, **_AREA)
    vl_pixels: int = param(INT, 384 * 384, help=_VL_HELP, **_AREA)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        images = [i for i in (self.image1, self.image2, self.image3) if i is not None]
        return _encode(
            ctx,
            self.text_encoder,
            self.prompt,
            self.vae,
            images,
            plus=True,
            vae_pixels=self.vae_pixels,
            vl_pixels=self.vl_pixels,
        )


NODES: tuple[NodeSpec, ...] = (TextEncodeQwenImageEdit.spec, TextEncodeQwenImageEditPlus.spec)
