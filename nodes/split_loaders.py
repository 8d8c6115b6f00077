"""Loader nodes for split model files: `LoadDenoiser`, `LoadTextEncoder`, `LoadVAE`.

Lives here: the node types and the `SPLIT_NODES` tuple of their specs (included in `nodes.diffusion.NODES`).
Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context` and `pipelines.quant`; the loading itself is in pipelines/quant/split_files.py.

The files people download for modern models: a transformer-only or UNet-only file (`flux1-dev.safetensors`,
an fp8 release, a city96 `.gguf`), text encoder files (`clip_l`, `clip_g`, `t5xxl_fp16`) and a VAE
(`ae.safetensors`). The family is detected from tensor names and shapes when left on auto, and every node
logs what it found.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, param_like, wire
from nodes.kinds import CHOICE, PATH
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER, TEXT_ENCODER, VAE
from pipelines.diffusion.families import DIFFUSION_IMPORTS, FAMILIES
from pipelines.quant.formats import STORAGE_CHOICES

if TYPE_CHECKING:
    from pipelines.diffusion.values import DenoiserRef

_FAMILIES = ("auto", *FAMILIES)
_DTYPES = ("auto", "float32", "float16", "bfloat16", *STORAGE_CHOICES)
_DTYPE_HELP = (
    "auto: float32 on CPU, the family's half type on CUDA; fp8_e4m3fn / fp8_e5m2 / int8: weights kept in "
    "8 bits, each layer upcast as it runs (a .gguf keeps its own quantization)"
)
_CONFIG_HELP = "a config-only diffusers folder of the model (default: the one shipped for the family)"
_WEIGHTS = "Weights (*.safetensors *.gguf)"


def resolve_split_path(spec: str) -> Path:
    from pipelines.quant.demo_split import resolve_split_path as resolve  # torch: only when a node runs

    return resolve(spec)


def _config(config_dir: str) -> Path | None:
    return resolve_split_path(config_dir) if config_dir else None


_SAFETENSORS = "Weights (*.safetensors)"


@node_type(
    "LoadDenoiser",
    tags=("UNETLoader",),
    title="Load UNet / DiT File",
    category="diffusion/loaders",
    description="A transformer-only or UNet-only file (.safetensors in diffusers or the release's layout, "
    "fp8 or not, or .gguf kept quantized); ComfyUI's diffusion_models files of Z-Image, Qwen-Image, FLUX.2 "
    "and Wan too (bf16, fp8 scaled, GGUF).",
    outputs=[Output("denoiser", DENOISER)],
)
class LoadDenoiser(Node):
    reference: DenoiserRef | None = wire(
        DENOISER, optional=True, help="take the scheduler settings from this model"
    )
    path: str = param(PATH, "", file_filter=_WEIGHTS)
    family: str = param(CHOICE, "auto", choices=_FAMILIES, help="auto: from the tensor names")
    dtype: str = param(CHOICE, "auto", choices=_DTYPES, help=_DTYPE_HELP)
    config_dir: str = param(PATH, "", file_filter="dir", help=_CONFIG_HELP)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*DIFFUSION_IMPORTS)
        from pipelines.quant.split_files import load_denoiser_file

        ref, message = load_denoiser_file(
            ctx.memory,
            resolve_split_path(self.path),
            family=self.family,
            dtype=self.dtype,
            config_dir=_config(self.config_dir),
            allow_pickle=ctx.allow_pickle,
            scheduler_config=self.reference.scheduler_config if self.reference is not None else None,
        )
        ctx.log(f"detected {message}")
        return {"denoiser": ref}


@node_type(
    "LoadTextEncoder",
    tags=("CLIPLoader", "DualCLIPLoader", "TripleCLIPLoader"),
    title="Load Text Encoder Files",
    category="diffusion/loaders",
    description="One to three text encoder files (CLIP-L, CLIP-G, T5-XXL) for sd1, sdxl, sd3 or flux; or one "
    "of ComfyUI's text_encoders files: Qwen3 (Z-Image, FLUX.2 klein), Qwen2.5-VL (Qwen-Image), Mistral (FLUX.2 "
    "dev), UMT5 (Wan); for LTX-2, ComfyUI's Gemma 3 file with the LTX-2 checkpoint (path_2: its text connectors).",
    outputs=[Output("text_encoder", TEXT_ENCODER)],
)
class LoadTextEncoder(Node):
    path: str = param(PATH, "", file_filter=_SAFETENSORS)
    path_2: str = param(PATH, "", file_filter=_SAFETENSORS, help="second file, if any")
    path_3: str = param(PATH, "", file_filter=_SAFETENSORS, help="third file (SD3)")
    family: str = param(
        CHOICE,
        "auto",
        choices=_FAMILIES,
        help="auto: from the files (CLIP-L: sd; +CLIP-G: sdxl; CLIP-L + T5: flux; all three: sd3)",
    )
    dtype: str = param_like(LoadDenoiser, "dtype")
    config_dir: str = param_like(LoadDenoiser, "config_dir")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*DIFFUSION_IMPORTS)
        from pipelines.quant.split_files import load_text_encoder_files

        paths = [resolve_split_path(p) for p in (self.path, self.path_2, self.path_3) if p]
        if not paths:
            raise ValueError("field 'path': give at least one text encoder file")
        ref, message = load_text_encoder_files(
            ctx.memory,
            paths,
            family=self.family,
            dtype=self.dtype,
            config_dir=_config(self.config_dir),
            allow_pickle=ctx.allow_pickle,
        )
        ctx.log(f"detected {message}")
        return {"text_encoder": ref}


@node_type(
    "LoadVAE",
    tags=("VAELoader",),
    title="Load VAE File",
    category="diffusion/loaders",
    description="A separate VAE .safetensors (ae.safetensors, vae-ft-mse-840000-ema-pruned, a diffusers file, "
    "ComfyUI's wan_2.1_vae, qwen_image_vae, flux2-vae; an LTX-2 checkpoint: its video VAE with the audio VAE and "
    "vocoder).",
    outputs=[Output("vae", VAE)],
)
class LoadVAE(Node):
    path: str = param(PATH, "", file_filter=_SAFETENSORS, comfy="vae_name")
    family: str = param(
        CHOICE,
        "auto",
        choices=_FAMILIES,
        help="auto: 4 latent channels -> sd, 16 -> flux (SDXL and SD3 VAEs have the same shapes: pick them)",
    )
    dtype: str = param_like(LoadDenoiser, "dtype")
    config_dir: str = param_like(LoadDenoiser, "config_dir")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*DIFFUSION_IMPORTS)
        from pipelines.quant.split_files import load_vae_file

        ref, message = load_vae_file(
            ctx.memory,
            resolve_split_path(self.path),
            family=self.family,
            dtype=self.dtype,
            config_dir=_config(self.config_dir),
            allow_pickle=ctx.allow_pickle,
        )
        ctx.log(f"detected {message}")
        return {"vae": ref}


SPLIT_NODES: tuple[NodeSpec, ...] = (LoadDenoiser.spec, LoadTextEncoder.spec, LoadVAE.spec)
