"""Diffusion nodes: load a model, encode prompts, sample latents, decode and encode images.

Lives here: the `NODES` tuple (`LoadDiffusionModel`, `TextEncode`, `EmptyLatent`, `Sampler`, `VAEDecode`,
`VAEEncode`, plus `LoadDenoiser`, `LoadTextEncoder`, `LoadVAE` from nodes.split_loaders). Imports `nodes.spec`,
`nodes.types`, `nodes.context`, `nodes.split_loaders`, `pipelines.paths` and `pipelines.diffusion`; the model
code lives in pipelines/. At module level only the light facts the specs need (`families`, `schedulers`,
`prompt_weights`, `quant.formats`: names, no torch); each run function imports its pipeline code, so listing
node types or painting the editor never imports torch or diffusers.

Every model is used through `ctx.memory.use(...)` inside pipelines/diffusion, so under the sequential policy
the text encoder is gone before the denoiser loads, and the denoiser before the VAE decodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory import user_data_dir
from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.split_loaders import SPLIT_NODES
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT, TEXT_ENCODER, VAE
from pipelines.diffusion.families import DIFFUSION_IMPORTS
from pipelines.diffusion.prompt_weights import WEIGHTINGS
from pipelines.diffusion.schedulers import K_SCHEDULER_NAMES, SCHEDULER_NAMES, SIGMA_SCHEDULES
from pipelines.quant.formats import STORAGE_CHOICES
from pipelines.text_limits import limit_diffusion_prompt

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import DenoiserRef, Latents, TextEncoderRef, VaeRef

SEED_MAX = 2**63 - 1
DTYPES = ("auto", "float32", "float16", "bfloat16", *STORAGE_CHOICES)
_DTYPE_HELP = (
    "auto: float32 on CPU, the family's usual half type (float16) on CUDA; fp8_e4m3fn / fp8_e5m2 / int8: "
    "the model's weights kept in 8 bits, each layer upcast to the auto dtype as it runs"
)


def _run_load_model(ctx: NodeContext, path: str, kind: str, dtype: str, config_dir: str) -> dict[str, Any]:
    ctx.importing(*DIFFUSION_IMPORTS)
    from pipelines.diffusion.loading import load_model

    loaded = load_model(
        ctx.memory,
        path,
        kind=kind,
        dtype=dtype,
        allow_pickle=ctx.allow_pickle,
        config_dir=Path(config_dir).expanduser() if config_dir else None,
        on_progress=ctx.progress_callback("load_bytes"),
    )
    ctx.log(f"{loaded.denoiser.family.title}, {str(loaded.denoiser.dtype).removeprefix('torch.')}")
    return {"denoiser": loaded.denoiser, "text_encoder": loaded.text_encoder, "vae": loaded.vae}


def _run_text_encode(
    ctx: NodeContext, text_encoder: TextEncoderRef, text: str, weighting: str = "comfy", embeddings: str = ""
) -> dict[str, Any]:
    from pipelines.diffusion.conditioning import encode_prompt

    text, cut = limit_diffusion_prompt(text)
    if cut:
        ctx.log(cut)
    folder = Path(embeddings).expanduser() if embeddings else user_data_dir() / "embeddings"
    cond = encode_prompt(ctx.memory, text_encoder, text, weighting=weighting, embeddings_dir=folder)
    return {"conditioning": cond}


def _run_empty_latent(
    ctx: NodeContext,
    denoiser: DenoiserRef | None,
    vae: VaeRef | None,
    width: int,
    height: int,
    batch: int,
) -> dict[str, Any]:
    import torch

    from pipelines.diffusion.sizes import size_for_denoiser
    from pipelines.diffusion.values import Latents

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
    sigma_schedule: str,
    steps: int,
    cfg: float,
    seed: int,
    denoise: float,
    preview_every: int,
) -> dict[str, Any]:
    from pipelines.diffusion.previews import latent_preview, load_preview_decoder, model_folder
    from pipelines.diffusion.sampling import SamplerSettings, StepInfo, sample

    settings = SamplerSettings(
        scheduler=scheduler, sigma_schedule=sigma_schedule, steps=steps, cfg=cfg, seed=seed, denoise=denoise
    )
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
    from pipelines.diffusion.tiled_vae import decode_tiled, plan_decode
    from pipelines.diffusion.vae import decode

    # Tiles only when the memory manager predicts a full decode won't fit (VAEDecodeTiled gives control).
    plan = plan_decode(ctx.memory, vae, latent)
    if plan.tiled:
        ctx.metric("vae_tiled", 1.0)
        ctx.metric("vae_tile_px", plan.tile_px)
        ctx.log(f"tiled VAE decode, {plan.tile_px}px tiles: {plan.reason}")
        return {"image": decode_tiled(ctx.memory, vae, latent, plan)}
    return {"image": decode(ctx.memory, vae, latent)}


def _run_vae_encode(ctx: NodeContext, vae: VaeRef, image: torch.Tensor) -> dict[str, Any]:
    from pipelines.diffusion.vae import encode

    return {"latent": encode(ctx.memory, vae, image)}


_MODEL_FILTER = "Diffusion models (*.safetensors *.ckpt model_index.json);;Folders (dir)"
_SIZE_HELP = "pixels; 0: the connected model's native size"

NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="LoadDiffusionModel",
        tags=("CheckpointLoaderSimple", "checkpoint"),
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
    *SPLIT_NODES,  # LoadDenoiser, LoadTextEncoder, LoadVAE (nodes/split_loaders.py)
    NodeSpec(
        type="TextEncode",
        tags=("CLIPTextEncode", "CLIPTextEncodeFlux"),
        title="Text Encode",
        category="diffusion",
        inputs=[Input("text_encoder", TEXT_ENCODER)],
        params=[
            Param("text", "text", default="", help="the prompt (may be wired from an LLM's text)"),
            Param(
                "weighting",
                "choice",
                default="comfy",
                choices=WEIGHTINGS,
                help="(word:1.3) weights on CLIP encoders: comfy = ComfyUI's, a1111 = A1111's mean-normalised",
            ),
            Param(
                "embeddings",
                "path",
                default="",
                file_filter="dir",
                help="folder of textual-inversion files for embedding:NAME (default: the user data dir's "
                "embeddings/)",
            ),
        ],
        outputs=[Output("conditioning", CONDITIONING)],
        run=_run_text_encode,
    ),
    NodeSpec(
        type="EmptyLatent",
        tags=("EmptyLatentImage", "EmptySD3LatentImage"),
        title="Empty Latent",
        category="diffusion/latent",
        inputs=[Input("denoiser", DENOISER, optional=True), Input("vae", VAE, optional=True)],
        params=[
            Param(
                "width", "int", default=0, min=0, max=8192, step=8, help=_SIZE_HELP, zero_is_native_size=True
            ),
            Param(
                "height", "int", default=0, min=0, max=8192, step=8, help=_SIZE_HELP, zero_is_native_size=True
            ),
            Param("batch", "int", default=1, min=1, max=64),
        ],
        outputs=[Output("latent", LATENT)],
        run=_run_empty_latent,
    ),
    NodeSpec(
        type="Sampler",
        tags=("KSampler",),
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
                choices=(*SCHEDULER_NAMES, *K_SCHEDULER_NAMES),
                help="dpmpp_2m = DPM++ 2M; default = the model's own scheduler; Flux: euler or default; "
                "k_* = ComfyUI's KSampler samplers (same picture as ComfyUI for the same seed)",
            ),
            Param(
                "sigma_schedule",
                "choice",
                default="normal",
                choices=SIGMA_SCHEDULES,
                help="k_* samplers only: ComfyUI's scheduler (noise levels per step)",
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
        tags=("img2img",),
        title="VAE Encode",
        category="diffusion/latent",
        inputs=[Input("vae", VAE), Input("image", IMAGE)],
        outputs=[Output("latent", LATENT)],
        run=_run_vae_encode,
    ),
)
