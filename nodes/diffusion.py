"""Diffusion nodes: load a model, encode prompts, sample latents, decode and encode images.

Lives here: the `NODES` tuple (`LoadDiffusionModel`, `LoadDenoiser`, `LoadVAE`, `TextEncode`, `EmptyLatent`,
`Sampler`, `VAEDecode`, `VAEEncode`). Imports `nodes.spec`, `nodes.types`, `nodes.context`, `pipelines.paths`
and `pipelines.diffusion`; the model code lives in pipelines/.

Every model is used through `ctx.memory.use(...)` inside pipelines/diffusion, so under the sequential policy
the text encoder is gone before the denoiser loads, and the denoiser before the VAE decodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT, TEXT_ENCODER, VAE
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.loading import load_component_file, load_model, read_json
from pipelines.diffusion.previews import latent_preview, load_preview_decoder, model_folder
from pipelines.diffusion.sampling import SamplerSettings, StepInfo, sample
from pipelines.diffusion.schedulers import SCHEDULER_NAMES
from pipelines.diffusion.single_file import CONFIG_DIRS
from pipelines.diffusion.sizes import size_for_denoiser
from pipelines.diffusion.vae import decode, encode
from pipelines.diffusion.values import DenoiserRef, Latents, TextEncoderRef, VaeRef
from pipelines.paths import resolve_model_path

SEED_MAX = 2**63 - 1
DTYPES = ("auto", "float32", "float16", "bfloat16")
_DTYPE_HELP = "auto: float32 on CPU, the family's usual half type (float16) on CUDA"


def _run_load_model(ctx: NodeContext, path: str, kind: str, dtype: str, config_dir: str) -> dict[str, Any]:
    loaded = load_model(
        ctx.memory,
        path,
        kind=kind,
        dtype=dtype,
        allow_pickle=ctx.allow_pickle,
        config_dir=Path(config_dir).expanduser() if config_dir else None,
    )
    ctx.log(f"{loaded.denoiser.family.title}, {str(loaded.denoiser.dtype).removeprefix('torch.')}")
    return {"denoiser": loaded.denoiser, "text_encoder": loaded.text_encoder, "vae": loaded.vae}


def _component_config_dir(family: str, config_dir: str) -> Path:
    if config_dir:
        return Path(config_dir).expanduser()
    shipped = {"sd": CONFIG_DIRS["sd1"], "sdxl": CONFIG_DIRS["sdxl"]}
    if family not in shipped:
        raise ValueError(
            f"field 'config_dir': no config folder is shipped for {family}; give a diffusers folder"
        )
    return shipped[family]


def _run_load_denoiser(
    ctx: NodeContext,
    path: str,
    family: str,
    dtype: str,
    config_dir: str,
    reference: DenoiserRef | None,
) -> dict[str, Any]:
    fam = FAMILIES[family]
    folder = _component_config_dir(family, config_dir)
    handle = load_component_file(
        ctx.memory,
        resolve_model_path(path),
        component=fam.denoiser_subfolder,
        config_dir=folder,
        family=fam,
        dtype=dtype,
        allow_pickle=ctx.allow_pickle,
    )
    scheduler_config = (
        reference.scheduler_config
        if reference is not None
        else read_json(folder / "scheduler" / "scheduler_config.json")
    )
    return {
        "denoiser": DenoiserRef(
            handle=handle,
            family=fam,
            config=read_json(folder / fam.denoiser_subfolder / "config.json"),
            scheduler_config=scheduler_config,
            dtype=handle.spec.dtype,
            vae_scale_factor=2 ** (len(read_json(folder / "vae" / "config.json")["block_out_channels"]) - 1),
        )
    }


def _run_load_vae(ctx: NodeContext, path: str, family: str, dtype: str, config_dir: str) -> dict[str, Any]:
    fam = FAMILIES[family]
    folder = _component_config_dir(family, config_dir)
    handle = load_component_file(
        ctx.memory,
        resolve_model_path(path),
        component="vae",
        config_dir=folder,
        family=fam,
        dtype=dtype,
        allow_pickle=ctx.allow_pickle,
    )
    return {
        "vae": VaeRef(
            handle=handle,
            family=fam,
            config=read_json(folder / "vae" / "config.json"),
            dtype=handle.spec.dtype,
        )
    }


def _run_text_encode(ctx: NodeContext, text_encoder: TextEncoderRef, text: str) -> dict[str, Any]:
    return {"conditioning": encode_prompt(ctx.memory, text_encoder, text)}


def _run_empty_latent(
    ctx: NodeContext,
    denoiser: DenoiserRef | None,
    vae: VaeRef | None,
    width: int,
    height: int,
    batch: int,
) -> dict[str, Any]:
    # Channels and pixels-per-latent come from the VAE if wired, else the denoiser, else SD's 4 and 8.
    channels, scale = 4, 8
    if vae is not None:
        channels, scale = vae.latent_channels, vae.scale_factor
    elif denoiser is not None:
        channels, scale = int(denoiser.config.get("in_channels", 4)), denoiser.vae_scale_factor
    # 0 (the default) means the model's native size: 64 for the built-in model, 512 for SD1.x, 1024 SDXL.
    native, multiple = 512, scale
    if denoiser is not None:
        size = size_for_denoiser(denoiser)
        native, multiple = size.native, size.multiple
    elif vae is not None and isinstance(vae.config.get("sample_size"), int):
        native = int(vae.config["sample_size"])
    width, height = width or native, height or native
    if width % multiple or height % multiple:
        raise ValueError(f"width and height must be multiples of {multiple} (got {width}x{height})")
    samples = torch.zeros(batch, channels, height // scale, width // scale)
    return {"latent": Latents(samples=samples, vae_scale_factor=scale, source="empty")}


def _run_sampler(
    ctx: NodeContext,
    denoiser: DenoiserRef,
    positive: Any,
    negative: Any,
    latent: Latents | None,
    scheduler: str,
    steps: int,
    cfg: float,
    seed: int,
    denoise: float,
    preview_every: int,
) -> dict[str, Any]:
    settings = SamplerSettings(scheduler=scheduler, steps=steps, cfg=cfg, seed=seed, denoise=denoise)
    if latent is None:
        latent = _run_empty_latent(ctx, denoiser, None, 0, 0, 1)["latent"]

    decoder = load_preview_decoder(model_folder(denoiser.handle.spec.files)) if preview_every > 0 else None

    def on_step(info: StepInfo) -> None:
        show = preview_every > 0 and (info.step % preview_every == 0 or info.step == info.total)
        # The x0 prediction: what the picture is becoming (the noisy latents are mostly noise mid-run).
        seen = info.denoised if info.denoised is not None else info.latents
        preview = latent_preview(seen, denoiser.family, decoder=decoder) if show else None
        ctx.progress(info.step, info.total, kind="sampler_step", preview=preview)  # raises Cancelled

    out = sample(ctx.memory, denoiser, positive, negative, latent, settings, on_step=on_step)
    return {"latent": out}


def _run_vae_decode(ctx: NodeContext, vae: VaeRef, latent: Latents) -> dict[str, Any]:
    return {"image": decode(ctx.memory, vae, latent)}


def _run_vae_encode(ctx: NodeContext, vae: VaeRef, image: torch.Tensor) -> dict[str, Any]:
    return {"latent": encode(ctx.memory, vae, image)}


_MODEL_FILTER = "Diffusion models (*.safetensors *.ckpt model_index.json);;Folders (dir)"
_FAMILY_CHOICES = tuple(FAMILIES)
_SIZE_HELP = "pixels; 0: the connected model's native size"

NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="LoadDiffusionModel",
        title="Load Diffusion Model",
        category="diffusion/loaders",
        description="A diffusers folder (SD1.x/2.x, SDXL, PixArt-Sigma, SD3, Flux) or a single-file SD1.x/SDXL "
        "checkpoint, as lazy model handles.",
        params=[
            Param(
                "path",
                "path",
                default="builtin:shapes-sd",
                file_filter=_MODEL_FILTER,
                help="builtin:NAME, demo:tiny-sd|tiny-sdxl|tiny-pixart|tiny-sd3|tiny-flux, a diffusers "
                "folder, or an SD1.x/SDXL single-file .safetensors",
            ),
            Param("kind", "choice", default="auto", choices=("auto", "folder", "single_file")),
            Param("dtype", "choice", default="auto", choices=DTYPES, help=_DTYPE_HELP),
            Param(
                "config_dir",
                "path",
                default="",
                file_filter="dir",
                help="single files only: a config-only diffusers folder (default: shipped per family)",
            ),
        ],
        outputs=[Output("denoiser", DENOISER), Output("text_encoder", TEXT_ENCODER), Output("vae", VAE)],
        run=_run_load_model,
    ),
    NodeSpec(
        type="LoadDenoiser",
        title="Load UNet / DiT File",
        category="diffusion/loaders",
        description="A separate denoiser .safetensors (diffusers or original key names).",
        inputs=[
            Input("reference", DENOISER, optional=True, help="take the scheduler settings from this model")
        ],
        params=[
            Param("path", "path", default="", file_filter="Weights (*.safetensors)"),
            Param("family", "choice", default="sd", choices=_FAMILY_CHOICES),
            Param("dtype", "choice", default="auto", choices=DTYPES, help=_DTYPE_HELP),
            Param("config_dir", "path", default="", file_filter="dir"),
        ],
        outputs=[Output("denoiser", DENOISER)],
        run=_run_load_denoiser,
    ),
    NodeSpec(
        type="LoadVAE",
        title="Load VAE File",
        category="diffusion/loaders",
        description="A separate VAE .safetensors (e.g. vae-ft-mse-840000-ema-pruned).",
        params=[
            Param("path", "path", default="", file_filter="Weights (*.safetensors)"),
            Param("family", "choice", default="sd", choices=_FAMILY_CHOICES),
            Param("dtype", "choice", default="auto", choices=DTYPES, help=_DTYPE_HELP),
            Param("config_dir", "path", default="", file_filter="dir"),
        ],
        outputs=[Output("vae", VAE)],
        run=_run_load_vae,
    ),
    NodeSpec(
        type="TextEncode",
        title="Text Encode",
        category="diffusion",
        inputs=[Input("text_encoder", TEXT_ENCODER)],
        params=[Param("text", "text", default="", help="the prompt (may be wired from an LLM's text)")],
        outputs=[Output("conditioning", CONDITIONING)],
        run=_run_text_encode,
    ),
    NodeSpec(
        type="EmptyLatent",
        title="Empty Latent",
        category="diffusion/latent",
        inputs=[Input("denoiser", DENOISER, optional=True), Input("vae", VAE, optional=True)],
        params=[
            Param("width", "int", default=0, min=0, max=8192, step=8, help=_SIZE_HELP),
            Param("height", "int", default=0, min=0, max=8192, step=8, help=_SIZE_HELP),
            Param("batch", "int", default=1, min=1, max=64),
        ],
        outputs=[Output("latent", LATENT)],
        run=_run_empty_latent,
    ),
    NodeSpec(
        type="Sampler",
        title="Sampler",
        category="diffusion",
        inputs=[
            Input("denoiser", DENOISER),
            Input("positive", CONDITIONING),
            Input("negative", CONDITIONING, optional=True),
            # Unwired: an empty latent at the model's native size (as an Empty Latent with its defaults).
            Input("latent", LATENT, optional=True),
        ],
        params=[
            Param(
                "scheduler",
                "choice",
                default="dpmpp_2m",
                choices=SCHEDULER_NAMES,
                help="dpmpp_2m = DPM++ 2M; default = the model's own scheduler; Flux: euler or default",
            ),
            Param("steps", "int", default=20, min=1, max=1000),
            Param(
                "cfg",
                "float",
                default=4.0,
                min=0.0,
                max=100.0,
                step=0.5,
                help="classifier-free guidance scale; <= 1 or no negative wired skips the negative prompt. "
                "Flux: the distilled guidance value (the negative is not used)",
            ),
            Param("seed", "seed", default=42, min=0, max=SEED_MAX),
            Param(
                "denoise",
                "float",
                default=1.0,
                min=0.01,
                max=1.0,
                step=0.05,
                help="1: text-to-image from noise; below 1: image-to-image strength on the input latent",
            ),
            Param(
                "preview_every",
                "int",
                default=1,
                min=0,
                max=1000,
                help="latent preview every N steps (0: off)",
            ),
        ],
        outputs=[Output("latent", LATENT)],
        run=_run_sampler,
    ),
    NodeSpec(
        type="VAEDecode",
        title="VAE Decode",
        category="diffusion/latent",
        inputs=[Input("vae", VAE), Input("latent", LATENT)],
        outputs=[Output("image", IMAGE)],
        run=_run_vae_decode,
    ),
    NodeSpec(
        type="VAEEncode",
        title="VAE Encode",
        category="diffusion/latent",
        inputs=[Input("vae", VAE), Input("image", IMAGE)],
        outputs=[Output("latent", LATENT)],
        run=_run_vae_encode,
    ),
)
