"""CLIP vision nodes (ComfyUI's CLIPVisionLoader / CLIPVisionEncode): Wan 2.1 I2V's image encoder from a
`models/clip_vision/` file, and a picture paired with it for Wan Image To Video.

Lives here: the node types `LoadCLIPVision`, `CLIPVisionEncode` and the `NODES` tuple of their specs.
Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`, `nodes.split_loaders`;
torch and pipelines.diffusion inside the run functions, so listing node types stays light.

The encoder runs where the Wan sampler needs its states (as with a diffusers folder's own `image_encoder`):
CLIP Vision Encode hands on the encoder and the picture (`wan_image.ClipVisionOutput`), Wan Image To Video puts
them on its latent, and the sampler encodes the picture with the folder's processor settings (resize,
center crop, normalise) and takes the second-to-last hidden states, as `WanImageToVideoPipeline` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, PATH
from nodes.spec import NodeSpec, Output
from nodes.split_loaders import _config, resolve_split_path
from nodes.types import CLIP_VISION, CLIP_VISION_OUTPUT, IMAGE

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.wan_image import ImageEncoderRef

_CROPS = ("center", "none")


@node_type(
    "LoadCLIPVision",
    tags=("CLIPVisionLoader", "clip vision", "image encoder"),
    title="Load CLIP Vision",
    category="diffusion/loaders",
    description="A CLIP vision encoder file (ComfyUI's clip_vision_h.safetensors): Wan 2.1 image-to-video's "
    "image encoder.",
    outputs=[Output("clip_vision", CLIP_VISION)],
)
class LoadCLIPVision(Node):
    path: str = param(PATH, "", file_filter="Weights (*.safetensors)", comfy="clip_name")
    config_dir: str = param(
        PATH,
        "",
        file_filter="dir",
        help="a config folder with image_encoder/ and image_processor/ (default: shipped)",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.comfy_layouts.clip_vision import load_comfy_clip_vision

        ref, message = load_comfy_clip_vision(
            ctx.memory, resolve_split_path(self.path), config_dir=_config(self.config_dir)
        )
        ctx.log(f"detected {message}")
        return {"clip_vision": ref}


@node_type(
    "CLIPVisionEncode",
    tags=("clip vision", "image encoder"),
    title="CLIP Vision Encode",
    category="diffusion/conditioning",
    description="A picture for a CLIP vision encoder (Wan Image To Video's clip_vision_output): encoded by the "
    "sampler that uses it.",
    outputs=[Output("clip_vision_output", CLIP_VISION_OUTPUT)],
)
class CLIPVisionEncode(Node):
    clip_vision: ImageEncoderRef = wire(CLIP_VISION)
    image: torch.Tensor = wire(IMAGE)
    crop: str = param(
        CHOICE,
        "center",
        choices=_CROPS,
        help="none: Nodeloom center-crops as the encoder's processor does",
        comfy="crop",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.wan_image import ClipVisionOutput

        if self.crop != "center":
            ctx.log(f"crop {self.crop!r}: the picture is center-cropped by the encoder's processor")
        return {"clip_vision_output": ClipVisionOutput(self.clip_vision, self.image[0, ..., :3].float())}


NODES: tuple[NodeSpec, ...] = (LoadCLIPVision.spec, CLIPVisionEncode.spec)
