"""Diffusion nodes: load a model, encode prompts, sample latents, decode and encode images.

Lives here: the node types `LoadDiffusionModel`, `TextEncode`, `EmptyLatent`, `Sampler` (its fields shared with
SamplerAdvanced in `KSamplerFields`), `VAEDecode`, `VAEEncode`, and the `NODES` tuple of their specs (plus
`LoadDenoiser`, `LoadTextEncoder`, `LoadVAE` from nodes.split_loaders). Imports `nodes.spec`,
`nodes.types`, `nodes.context`, `nodes.split_loaders`, `pipelines.paths` and `pipelines.diffusion`; the model
code lives in pipelines/. At module level only the light facts the specs need (`families`, `schedulers`,
`guidance`, `prompt_weights`, `quant.formats`: names, no torch); each run function imports its pipeline
code, so listing node types or painting the editor never imports torch or diffusers.

Every model is used through `ctx.memory.use(...)` inside pipelines/diffusion, so under the sequential policy
the text encoder is gone before the denoiser loads, and the denoiser before the VAE decodes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memory import user_data_dir
from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, settings_from, shared_fields, wire
from nodes.kinds import CHOICE, FLOAT, INT, PATH, SEED, TEXT
from nodes.spec import NodeSpec, Output
from nodes.split_loaders import SPLIT_NODES
from nodes.types import CONDITIONING, DENOISER, IMAGE, LATENT, SIGMAS, TEXT_ENCODER, VAE
from pipelines.diffusion.families import DIFFUSION_IMPORTS
from pipelines.diffusion.guidance import CFG_RULES
from pipelines.diffusion.prompt_weights import WEIGHTINGS
from pipelines.diffusion.schedulers import K_SCHEDULER_NAMES, SCHEDULER_NAMES, SIGMA_SCHEDULES
from pipelines.diffusion.step_cache import STEP_CACHES
from pipelines.quant.formats import STORAGE_CHOICES
from pipelines.text_limits import limit_diffusion_prompt

if TYPE_CHECKING:
    import torch

    from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents, TextEncoderRef, VaeRef

SEED_MAX = 2**63 - 1
DTYPES = ("auto", "float32", "float16", "bfloat16", *STORAGE_CHOICES)
_DTYPE_HELP = (
    "auto: float32 on CPU, the family's usual half type (float16) on CUDA; fp8_e4m3fn / fp8_e5m2 / int8: "
    "the model's weights kept in 8 bits, each layer upcast to the auto dtype as it runs"
)


_MODEL_FILTER = "Diffusion models (*.safetensors *.ckpt model_index.json);;Folders (dir)"
_SIZE_HELP = "pixels; 0: the connected model's native size"


@node_type(
    "LoadDiffusionModel",
    tags=("CheckpointLoaderSimple", "checkpoint"),
    title="Load Diffusion Model",
    category="diffusion/loaders",
    description="A diffusers folder (SD1.x/2.x, SDXL, PixArt-Sigma, SD3, Flux, Z-Image, Qwen-Image, FLUX.2, Wan) "
    "or a single-file SD1.x/SDXL "
    "checkpoint, or ComfyUI's LTX-2 checkpoint (its text encoder output: use Load Text Encoder Files), as lazy "
    "model handles.",
    outputs=[Output("denoiser", DENOISER), Output("text_encoder", TEXT_ENCODER), Output("vae", VAE)],
)
class LoadDiffusionModel(Node):
    path: str = param(
        PATH,
        "builtin:shapes-sd",
        file_filter=_MODEL_FILTER,
        help="builtin:NAME, demo:tiny-sd|tiny-sdxl|tiny-pixart|tiny-sd3|tiny-flux|tiny-zimage|tiny-qwenimage|"
        "tiny-flux2-klein|tiny-flux2-dev|tiny-wan, a diffusers "
        "folder, or an SD1.x/SDXL single-file .safetensors",
        comfy="ckpt_name",
    )
    kind: str = param(CHOICE, "auto", choices=("auto", "folder", "single_file"))
    dtype: str = param(CHOICE, "auto", choices=DTYPES, help=_DTYPE_HELP)
    config_dir: str = param(
        PATH,
        "",
        file_filter="dir",
        help="single files only: a config-only diffusers folder (default: shipped per family)",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*DIFFUSION_IMPORTS)
        from pipelines.diffusion.loading import load_model

        loaded = load_model(
            ctx.memory,
            self.path,
            kind=self.kind,
            dtype=self.dtype,
            allow_pickle=ctx.allow_pickle,
            config_dir=Path(self.config_dir).expanduser() if self.config_dir else None,
        )
        ctx.log(f"{loaded.denoiser.family.title}, {str(loaded.denoiser.dtype).removeprefix('torch.')}")
        return {"denoiser": loaded.denoiser, "text_encoder": loaded.text_encoder, "vae": loaded.vae}


@node_type(
    "TextEncode",
    tags=("CLIPTextEncode", "CLIPTextEncodeFlux"),
    title="Text Encode",
    category="diffusion",
    outputs=[Output("conditioning", CONDITIONING)],
)
class TextEncode(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    text: str = param(TEXT, "", help="the prompt (may be wired from an LLM's text)", comfy="text")
    weighting: str = param(
        CHOICE,
        "comfy",
        choices=WEIGHTINGS,
        help="(word:1.3) weights on CLIP encoders: comfy = ComfyUI's, a1111 = A1111's mean-normalised",
    )
    embeddings: str = param(
        PATH,
        "",
        file_filter="dir",
        help="folder of textual-inversion files for embedding:NAME (default: the user data dir's embeddings/)",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.conditioning import encode_prompt

        text, cut = limit_diffusion_prompt(self.text)
        if cut:
            ctx.log(cut)
        folder = Path(self.embeddings).expanduser() if self.embeddings else user_data_dir() / "embeddings"
        cond = encode_prompt(
            ctx.memory, self.text_encoder, text, weighting=self.weighting, embeddings_dir=folder
        )
        return {"conditioning": cond}


@node_type(
    "EmptyLatent",
    tags=("EmptyLatentImage", "EmptySD3LatentImage"),
    title="Empty Latent",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
)
class EmptyLatent(Node):
    denoiser: DenoiserRef | None = wire(DENOISER, optional=True)
    vae: VaeRef | None = wire(VAE, optional=True)
    width: int = param(
        INT, 0, min=0, max=8192, step=8, help=_SIZE_HELP, zero_is_native_size=True, comfy="width"
    )
    height: int = param(
        INT, 0, min=0, max=8192, step=8, help=_SIZE_HELP, zero_is_native_size=True, comfy="height"
    )
    batch: int = param(INT, 1, min=1, max=64, comfy="batch_size")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        import torch

        from pipelines.diffusion.sizes import size_for_denoiser
        from pipelines.diffusion.values import DEFAULT_VAE_SCALE, Latents

        denoiser, vae = self.denoiser, self.vae
        # Channels and pixels-per-latent come from the VAE if wired, else the denoiser, else SD's 4 and 8.
        channels, scale = 4, DEFAULT_VAE_SCALE
        if vae is not None:
            channels, scale = vae.latent_channels, vae.scale_factor
        elif denoiser is not None:
            channels, scale = int(denoiser.config.get("in_channels", 4)), denoiser.vae_scale_factor
            if denoiser.family.packs_latents:  # Flux, Qwen-Image: in_channels counts 2x2-packed channels
                channels //= 4
        # 0 (the default) means the model's native size: 64 for the built-in model, 512 for SD1.x, 1024 SDXL.
        native, multiple = 512, scale
        why = "no model to size from: wire a denoiser or VAE, or set width/height"
        if denoiser is not None:
            size = size_for_denoiser(denoiser)
            native, multiple = size.native, size.multiple
            why = f"the native size of the denoiser ({denoiser.family.title})"
        elif vae is not None and isinstance(vae.config.get("sample_size"), int):
            native = int(vae.config["sample_size"])
            why = "the VAE's native size"
        width, height = self.width or native, self.height or native
        if not (self.width and self.height):  # a size the user did not type: say which and why
            ctx.log(f"{width}x{height} px: {why}")
        if vae is None and denoiser is not None and denoiser.family.denoiser_call == "minimax":
            scale = multiple = DEFAULT_VAE_SCALE  # a still on ComfyUI's 8 px grid (minimax_vae.still_request)
        if width % multiple or height % multiple:
            raise ValueError(f"width and height must be multiples of {multiple} (got {width}x{height})")
        samples = torch.zeros(self.batch, channels, height // scale, width // scale)
        return {"latent": Latents(samples=samples, vae_scale_factor=scale, source="empty")}


@shared_fields
class KSamplerFields(Node):
    """What Sampler and SamplerAdvanced (nodes/comfy/node_types.py) both take: one declaration of each."""

    denoiser: DenoiserRef = wire(DENOISER)
    positive: Conditioning = wire(CONDITIONING)
    negative: Conditioning | None = wire(CONDITIONING, optional=True)
    # Unwired: an empty latent at the model's native size (as an Empty Latent with its defaults).
    latent: Latents | None = wire(LATENT, optional=True)
    sigmas: tuple[float, ...] | None = wire(
        SIGMAS,
        optional=True,
        help="a hand-given schedule (Manual Sigmas), stepped through as it is instead of `steps` (LTX-2)",
    )
    scheduler: str = param(
        CHOICE,
        "dpmpp_2m",
        choices=(*SCHEDULER_NAMES, *K_SCHEDULER_NAMES),
        help="dpmpp_2m = DPM++ 2M; default = the model's own scheduler; Flux, SD3, Z-Image, Qwen-Image: euler or default; "
        "k_* = ComfyUI's KSampler samplers (same picture as ComfyUI for the same seed)",
    )
    sigma_schedule: str = param(
        CHOICE,
        "normal",
        choices=SIGMA_SCHEDULES,
        help="k_* samplers only: ComfyUI's scheduler (noise levels per step)",
    )
    steps: int = param(INT, 20, min=1, max=1000, comfy="steps")
    cfg: float = param(
        FLOAT,
        4.0,
        min=0.0,
        max=100.0,
        step=0.5,
        help="classifier-free guidance scale; no negative wired skips the negative prompt, and so "
        "does cfg <= 1 (k_* samplers: only cfg = 1, as ComfyUI). "
        "Flux: the distilled guidance value (the negative is not used); "
        "Z-Image: the pipeline's guidance_scale, pos + cfg * (pos - neg), 0 = no guidance; "
        "Qwen-Image: the pipeline's true_cfg_scale, neg + cfg * (pos - neg) rescaled to the positive's norm, "
        "cfg <= 1 = no guidance (cfg_rule pipeline); "
        "FLUX.2 [klein]: true CFG above 1 on base models, ignored by distilled ones (as the pipeline); "
        "FLUX.2 [dev]: the embedded guidance value (the negative is not used)",
        comfy="cfg",
    )
    cfg_rule: str = param(
        CHOICE,
        "pipeline",
        choices=CFG_RULES,
        help="how cfg combines the prompts (Qwen-Image; the other families: pipeline only): pipeline = the "
        "diffusers pipeline's rule; comfyui = ComfyUI's plain neg + cfg * (pos - neg), what an imported graph "
        "runs; comfyui_cfgnorm = that, then ComfyUI's CFGNorm (x0 scaled to the positive's norm) at cfg_norm",
    )
    cfg_norm: float = param(
        FLOAT, 1.0, min=0.0, max=100.0, step=0.01, help="cfg_rule comfyui_cfgnorm: ComfyUI's CFGNorm strength"
    )
    seed: int = param(SEED, 42, min=0, max=SEED_MAX, comfy="seed")
    cache: str = param(
        CHOICE,
        "off",
        choices=STEP_CACHES,
        help="step cache on a DiT's blocks (Flux, FLUX.2, SD3, Z-Image, Qwen-Image, Wan): first-block reuses the "
        "other blocks' last output while the first block's changes by less than cache_threshold; taylorseer "
        "computes every cache_threshold steps and extrapolates in between; easy (EasyCache, also on SD 1.x/SDXL "
        "UNets) reuses whole steps while their predicted change stays below cache_threshold (0.2 as ComfyUI); "
        "off = the exact picture",
    )
    cache_threshold: float = param(
        FLOAT,
        0.1,
        min=0.001,
        max=100.0,
        step=0.01,
        help="first-block: relative change below which blocks are skipped (higher = faster, rougher); "
        "taylorseer: steps between full computations",
    )


@node_type(
    "Sampler", tags=("KSampler",), title="Sampler", category="diffusion", outputs=[Output("latent", LATENT)]
)
class Sampler(KSamplerFields):
    denoise: float = param(
        FLOAT,
        1.0,
        min=0.01,
        max=1.0,
        step=0.05,
        help="1: text-to-image from noise; below 1: image-to-image strength on the input latent",
        comfy="denoise",
    )
    preview_every: int = param(INT, 1, min=0, max=1000, help="latent preview every N steps (0: off)")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.denoising import sample
        from pipelines.diffusion.diverged import check_finite_latents
        from pipelines.diffusion.previews import latent_preview, load_preview_decoder, model_folder
        from pipelines.diffusion.sampling import SamplerSettings
        from pipelines.steps import Step

        settings = settings_from(SamplerSettings, self)
        denoiser, every = self.denoiser, self.preview_every
        latent = self.latent if self.latent is not None else EmptyLatent(denoiser=denoiser).run(ctx)["latent"]
        decoder = load_preview_decoder(model_folder(denoiser.handle.spec.files)) if every > 0 else None

        def on_step(info: Step) -> None:
            show = every > 0 and (info.step % every == 0 or info.step == info.total)
            # The x0 prediction: what the picture is becoming (the noisy latents are mostly noise mid-run).
            seen = info.denoised if info.denoised is not None else info.latents
            preview = latent_preview(seen, denoiser.family, decoder=decoder) if show else None
            ctx.progress(info.step, info.total, kind="sampler_step", preview=preview)  # raises Cancelled

        _report_speed(ctx)
        with _cache_report(ctx):
            out = sample(
                ctx.memory, denoiser, self.positive, self.negative, latent, settings, on_step=on_step
            )
        check_finite_latents(out, settings.steps, denoiser.scheduler_config)
        return {"latent": out}


def _video_frames(ctx: NodeContext, vae: VaeRef, latent: Latents) -> Any:
    """A Wan video latent -> its frames as an image batch (T, H, W, 3), as ComfyUI's VAE Decode gives them
    (the templates wire them to Create Video); decoded in chunks or tiles when a whole decode won't fit."""
    from pipelines.diffusion.video_tiling import decode_video_planned, video_plan_for

    plan = video_plan_for(ctx.memory, vae, latent)
    ctx.metric("vae_tiled", 0.0 if plan.mode == "full" else 1.0)
    return decode_video_planned(ctx.memory, vae, latent, plan)


@node_type("VAEDecode", title="VAE Decode", category="diffusion/latent", outputs=[Output("image", IMAGE)])
class VAEDecode(Node):
    vae: VaeRef = wire(VAE)
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.tiled_vae import decode_tiled, plan_decode
        from pipelines.diffusion.vae import decode

        if self.latent.samples.ndim == 5 and self.vae.family.name == "minimax":  # ComfyUI's H3 templates
            from pipelines.diffusion.minimax_vae import decode_minimax_frames

            return {
                "image": decode_minimax_frames(ctx.memory, self.vae, self.latent)
            }  # the frames as a batch
        if self.latent.samples.ndim == 5:  # (B, C, frames, h, w): a video model's latent
            if self.vae.family.name == "ltx2":  # its frames come with a sound track: VAE Decode Video
                raise ValueError("input 'latent': a video latent; decode it with VAE Decode Video")
            return {"image": _video_frames(ctx, self.vae, self.latent)}
        # Tiles only when the memory manager predicts a full decode won't fit (VAEDecodeTiled gives control).
        plan = plan_decode(ctx.memory, self.vae, self.latent)
        if plan.tiled:
            ctx.metric("vae_tiled", 1.0)
            ctx.metric("vae_tile_px", plan.tile_px)
            ctx.log(f"tiled VAE decode, {plan.tile_px}px tiles: {plan.reason}")
            return {"image": decode_tiled(ctx.memory, self.vae, self.latent, plan)}
        return {"image": decode(ctx.memory, self.vae, self.latent)}


@node_type(
    "VAEEncode",
    tags=("img2img",),
    title="VAE Encode",
    category="diffusion/latent",
    outputs=[Output("latent", LATENT)],
)
class VAEEncode(Node):
    vae: VaeRef = wire(VAE)
    image: torch.Tensor = wire(IMAGE)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.vae import encode

        return {"latent": encode(ctx.memory, self.vae, self.image)}


NODES: tuple[NodeSpec, ...] = (
    LoadDiffusionModel.spec,
    *SPLIT_NODES,  # LoadDenoiser, LoadTextEncoder, LoadVAE (nodes/split_loaders.py)
    TextEncode.spec,
    EmptyLatent.spec,
    Sampler.spec,
    VAEDecode.spec,
    VAEEncode.spec,
)


class _CacheRecords(logging.Handler):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(logging.INFO)
        self.ctx = ctx

    def emit(self, record: logging.LogRecord) -> None:
        reused = getattr(record, "cache_reused_steps", None)
        if reused is not None:
            self.ctx.metric("cache_reused_steps", reused)
            self.ctx.log(record.getMessage())


def _report_speed(ctx: NodeContext) -> None:
    """The run's speed choices (pipelines.diffusion.speed) in the Sampler's log and report (issue 33)."""
    from pipelines.diffusion.speed import describe, metrics, speed_choices

    choices = speed_choices(str(ctx.memory.device))
    ctx.log(describe(choices))
    for name, value in metrics(choices).items():
        ctx.metric(name, value)


@contextmanager
def _cache_report(ctx: NodeContext) -> Iterator[None]:
    """What a step cache skipped during this node's run goes to its log and the report."""
    logger = logging.getLogger("pipelines.diffusion.step_cache")
    handler, level = _CacheRecords(ctx), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
