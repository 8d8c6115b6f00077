"""LTX-2 node types around the model: its guidance terms as fields, the latent upsampler, frames-only decode.

Lives here: the node types `LTX2Guidance`, `LoadLatentUpsampler`, `LTXVLatentUpsampler`, `LTXVDecodeFrames`
and `NODES`. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`;
`pipelines.diffusion.*` inside the run functions, so listing node types stays light.

LTX-2 Guidance sets the terms `LTX2Pipeline` applies besides `cfg` (the Sampler's) on the denoiser it passes on
(`DenoiserRef.ltx2_guidance`): its defaults are the pipeline's, and ComfyUI's CFGGuider is audio CFG = cfg with
the other terms off (spatio-temporal guidance 0, modality isolation 1, no rescale).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import FLOAT, PATH
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER, IMAGE, LATENT, LATENT_UPSCALE_MODEL, VAE

if TYPE_CHECKING:
    from pipelines.diffusion.ltx2_upsample import LatentUpsamplerRef
    from pipelines.diffusion.values import DenoiserRef, Latents, VaeRef


def _scale(default: float, help_: str) -> Any:
    return param(FLOAT, default, min=0.0, max=100.0, step=0.1, help=help_)


@node_type(
    "LTX2Guidance",
    tags=("CFGGuider", "LTXVDualCFGGuider", "LTX-2", "guidance"),
    title="LTX-2 Guidance",
    category="diffusion/model",
    outputs=[Output("denoiser", DENOISER)],
    description="LTX-2's guidance terms besides cfg (audio CFG, spatio-temporal guidance, modality isolation, "
    "rescale) for the sampler this model feeds; the defaults are LTX2Pipeline's.",
)
class LTX2Guidance(Node):
    denoiser: DenoiserRef = wire(DENOISER)
    audio_cfg: float = _scale(7.0, "CFG on the sound track (1 = none; both 1: no negative pass)")
    stg_scale: float = _scale(1.0, "spatio-temporal guidance on the video (0 = off)")
    audio_stg_scale: float = _scale(1.0, "spatio-temporal guidance on the sound (0 = off)")
    modality_scale: float = _scale(3.0, "modality isolation on the video (1 = off)")
    audio_modality_scale: float = _scale(3.0, "modality isolation on the sound (1 = off)")
    rescale: float = param(FLOAT, 0.7, min=0.0, max=1.0, step=0.05, help="guidance rescale, video (0 = off)")
    audio_rescale: float = param(FLOAT, 0.7, min=0.0, max=1.0, step=0.05, help="guidance rescale, sound")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_sampling import LTX2Guidance as Terms

        if self.denoiser.family.name != "ltx2":
            raise ValueError(
                f"input 'denoiser': LTX-2 Guidance needs an LTX-2 model, got {self.denoiser.family.title}"
            )
        terms = Terms(
            stg_scale=self.stg_scale,
            modality_scale=self.modality_scale,
            guidance_rescale=self.rescale,
            audio_guidance_scale=self.audio_cfg,
            audio_stg_scale=self.audio_stg_scale,
            audio_modality_scale=self.audio_modality_scale,
            audio_guidance_rescale=self.audio_rescale,
        )
        return {"denoiser": replace(self.denoiser, ltx2_guidance=terms)}


@node_type(
    "LoadLatentUpsampler",
    tags=("LatentUpscaleModelLoader", "LTX-2", "upscale"),
    title="Load Latent Upsampler",
    category="diffusion/loaders",
    outputs=[Output("upscale_model", LATENT_UPSCALE_MODEL)],
    description="LTX-2's spatial latent upsampler (.safetensors with its config in the metadata).",
)
class LoadLatentUpsampler(Node):
    path: str = param(PATH, "", file_filter="Latent upsamplers (*.safetensors)", comfy="model_name")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_upsample import load_latent_upsampler
        from pipelines.paths import resolve_model_path

        if not self.path:
            raise ValueError("field 'path': choose a latent upsampler file (.safetensors)")
        ref = load_latent_upsampler(ctx.memory, resolve_model_path(self.path), allow_pickle=ctx.allow_pickle)
        return {"upscale_model": ref}


@node_type(
    "LTXVLatentUpsampler",
    tags=("LTXVLatentUpsampler", "LTX-2", "upscale"),
    title="LTXV Latent Upsampler",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
    description="An LTX-2 video latent at twice the width and height (the VAE's statistics un-normalise it).",
)
class LTXVLatentUpsampler(Node):
    latent: Latents = wire(LATENT)
    upscale_model: LatentUpsamplerRef = wire(LATENT_UPSCALE_MODEL)
    vae: VaeRef = wire(VAE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_upsample import upsample_latent

        return {"latent": upsample_latent(ctx.memory, self.upscale_model, self.vae, self.latent)}


@node_type(
    "LTXVDecodeFrames",
    tags=("LTX-2", "video", "frames"),
    title="LTXV Decode Frames",
    category="diffusion/latent",
    outputs=[Output("image", IMAGE)],
    description="An LTX-2 video latent -> its frames as an IMAGE batch (no sound: LTXV Audio VAE Decode).",
)
class LTXVDecodeFrames(Node):
    vae: VaeRef = wire(VAE)
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.ltx2_vae import decode_ltx2_video

        if self.vae.family.name != "ltx2":
            raise ValueError(
                f"input 'vae': LTXV Decode Frames needs an LTX-2 VAE, got {self.vae.family.title}'s"
            )
        return {"image": decode_ltx2_video(ctx.memory, self.vae, self.latent)}


NODES: tuple[NodeSpec, ...] = tuple(
    n.spec for n in (LTX2Guidance, LoadLatentUpsampler, LTXVLatentUpsampler, LTXVDecodeFrames)
)
