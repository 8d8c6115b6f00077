"""Model families: what differs between SD1.x/2.x, SDXL, PixArt-Sigma, SD3, Flux, Z-Image, Qwen-Image, FLUX.2
and Wan, declared as data.

Lives here: `FAMILIES` (of `Family` entries; the types are `pipelines.diffusion.family_types`', the 2026
image families' entries `families_image`, the video families' `families_video`), `CheckpointLayout`, `CHECKPOINT_LAYOUTS`, `ClassRef`,
`family_for_pipeline_class`, `detect_single_file_family`, `resolve_dtype`, `DIFFUSION_IMPORTS`. May import:
stdlib and pipelines.dtypes (the dtype rule) at module level; torch, diffusers and transformers when a class
or dtype is first asked for.

This is the one family registry: its ids (`FAMILIES` keys) are the only family names; the loaders, the models
library, the split-file loaders, the ComfyUI importer and the CLI read them and the facts declared here, and
content detection lives beside it (`pipelines.diffusion.family_detect`). An original-format checkpoint's
layout ("sd1", "sd2", "sdxl": `CHECKPOINT_LAYOUTS`) is a variant of a family, not a second family namespace.
The rest of pipelines/diffusion reads these facts instead of branching on names: which diffusers class holds
the denoiser, which text encoders and tokenizers a prompt goes through, how the denoiser is called, the
usual half type on CUDA and the latent-to-RGB projection used for previews. Classes and dtypes are named here and resolved on first use
(`ClassRef`), so that listing node types (whose choices read `FAMILIES`) imports neither torch nor diffusers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines.diffusion.families_image import (  # re-exported: every family is reachable from here
    FLUX2_DEV,
    FLUX2_KLEIN,
    FLUX3,
    KREA2,
    QWENIMAGE,
    QWENIMAGE_EDIT,
    ZIMAGE,
)
from pipelines.diffusion.families_qwen21 import QWENIMAGE21
from pipelines.diffusion.families_video import LTX2, MINIMAX, WAN
from pipelines.diffusion.family_types import (  # re-exported: the registry's types
    Family,
    TextEncoderSlot,
    _diffusers,
    _transformers,
)
from pipelines.dtypes import dtype_for_device

if TYPE_CHECKING:
    import torch


# What a session's first diffusion node imports (about 4 s on a 2-core machine), named so the node can say
# so while it happens (`NodeContext.importing`): the libraries and the bases every model class is built on
# (they bring in peft, scipy.stats and diffusers' quantizers); the model files themselves are imported one by
# one when a family asks for its classes (`pipelines.diffusion.lazy_models`).
DIFFUSION_IMPORTS = (
    "transformers",
    "diffusers",
    "transformers.modeling_utils",
    "diffusers.models.modeling_utils",
    "diffusers.loaders.single_file_model",
    "diffusers.loaders.peft",
)


_SD_RGB = (
    (0.3512, 0.2297, 0.3227),
    (0.3250, 0.4974, 0.2350),
    (-0.2829, 0.1762, 0.2721),
    (-0.2120, -0.2616, -0.7177),
)
_SDXL_RGB = (
    (0.3651, 0.4232, 0.4341),
    (-0.2533, -0.0042, 0.1068),
    (0.1076, 0.1111, -0.0362),
    (-0.3165, -0.2492, -0.2188),
)

SD = Family(
    name="sd",
    title="Stable Diffusion 1.x/2.x",
    pipeline_classes=("StableDiffusionPipeline", "StableDiffusionImg2ImgPipeline"),
    denoiser_subfolder="unet",
    denoiser_ref=_diffusers("UNet2DConditionModel"),
    text_encoders=(TextEncoderSlot("text_encoder", "tokenizer", _transformers("CLIPTextModel")),),
    cuda_dtype_name="float16",
    max_text_tokens=None,
    latent_rgb_factors=_SD_RGB,
    config_folder="sd15",
    class_marker="StableDiffusion",
)

SDXL = Family(
    name="sdxl",
    title="Stable Diffusion XL",
    pipeline_classes=("StableDiffusionXLPipeline", "StableDiffusionXLImg2ImgPipeline"),
    denoiser_subfolder="unet",
    denoiser_ref=_diffusers("UNet2DConditionModel"),
    text_encoders=(
        TextEncoderSlot("text_encoder", "tokenizer", _transformers("CLIPTextModel")),
        TextEncoderSlot("text_encoder_2", "tokenizer_2", _transformers("CLIPTextModelWithProjection")),
    ),
    cuda_dtype_name="float16",
    max_text_tokens=None,
    latent_rgb_factors=_SDXL_RGB,
    latent_rgb_bias=(0.1084, -0.0175, -0.0011),
    native_size=1024,
    prompt_encoder="clip_sdxl",
    size_conditioning=True,
    config_folder="sdxl",
    name_markers=("xl",),
    class_marker="XL",
)

PIXART_SIGMA = Family(
    name="pixart_sigma",
    title="PixArt-Sigma",
    pipeline_classes=("PixArtSigmaPipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("PixArtTransformer2DModel"),
    text_encoders=(TextEncoderSlot("text_encoder", "tokenizer", _transformers("T5EncoderModel")),),
    cuda_dtype_name="float16",
    max_text_tokens=300,  # PixArtSigmaPipeline's max_sequence_length default
    latent_rgb_factors=_SDXL_RGB,  # PixArt-Sigma uses the SDXL VAE
    latent_rgb_bias=(0.1084, -0.0175, -0.0011),
    denoiser_blocks=("transformer_blocks",),
    native_size=1024,
    size_multiple=16,
    prompt_encoder="t5",
    denoiser_call="pixart",
    class_marker="PixArt",
)

FLUX = Family(
    name="flux",
    title="Flux",
    pipeline_classes=("FluxPipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("FluxTransformer2DModel"),
    text_encoders=(
        TextEncoderSlot("text_encoder", "tokenizer", _transformers("CLIPTextModel")),  # pooled vector only
        TextEncoderSlot(
            "text_encoder_2", "tokenizer_2", _transformers("T5EncoderModel")
        ),  # per-token embeddings
    ),
    cuda_dtype_name="bfloat16",
    max_text_tokens=512,  # FluxPipeline's max_sequence_length default (schnell: 256)
    latent_rgb_factors=(),  # 16 latent channels: previews show the first three
    denoiser_blocks=("transformer_blocks", "single_transformer_blocks"),
    flow=True,
    native_size=1024,
    size_multiple=16,
    joint_text_tokens=512,  # max_text_tokens of T5
    prompt_encoder="flux",
    denoiser_call="flux",
    packs_latents=True,
    lora_layout="flux",
    config_folder="flux",
    name_markers=("flux",),
    class_marker="Flux",
)

SD3 = Family(
    name="sd3",
    title="Stable Diffusion 3",
    pipeline_classes=("StableDiffusion3Pipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("SD3Transformer2DModel"),
    text_encoders=(
        TextEncoderSlot("text_encoder", "tokenizer", _transformers("CLIPTextModelWithProjection")),  # CLIP-L
        TextEncoderSlot(
            "text_encoder_2", "tokenizer_2", _transformers("CLIPTextModelWithProjection")
        ),  # OpenCLIP bigG
        TextEncoderSlot("text_encoder_3", "tokenizer_3", _transformers("T5EncoderModel")),
    ),
    cuda_dtype_name="bfloat16",  # SD3.5 is published in bf16; SD3-medium also runs in it
    max_text_tokens=256,  # StableDiffusion3Pipeline's max_sequence_length default
    latent_rgb_factors=(),  # 16 latent channels: previews show the first three
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=1024,
    size_multiple=16,
    joint_text_tokens=77 + 256,  # CLIP's 77 and T5's max_text_tokens, concatenated by the pipeline
    prompt_encoder="sd3",
    denoiser_call="sd3",
    lora_layout="sd3",
    name_markers=("sd3", "sd_3"),
    class_marker="3",
)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (SD, SDXL, PIXART_SIGMA, SD3, FLUX, ZIMAGE, QWENIMAGE, FLUX2_KLEIN, FLUX2_DEV, WAN, LTX2)
}
FAMILIES[QWENIMAGE_EDIT.name] = QWENIMAGE_EDIT
FAMILIES[KREA2.name] = KREA2
FAMILIES[QWENIMAGE21.name] = QWENIMAGE21
FAMILIES[MINIMAX.name] = MINIMAX
FAMILIES[FLUX3.name] = FLUX3
# The order detection tries families in where one family's marker can occur in another's name: FLUX.2 [klein]
# before FLUX.2 [dev] before Flux before SD3 before SDXL for file names (ComfyUI's `flux-2-klein-4b` has all three); SDXL's "XL" before SD3's "3", and SD's bare "StableDiffusion" last, for
# diffusers class names.
NAME_HINT_ORDER: tuple[Family, ...] = (
    FLUX2_KLEIN,
    FLUX2_DEV,
    FLUX,
    SD3,
    SDXL,
    ZIMAGE,
    QWENIMAGE21,
    QWENIMAGE,
    WAN,
    LTX2,
)
NAME_HINT_ORDER += (MINIMAX,)  # "minimax_h3" is in no other family's names
NAME_HINT_ORDER = (FLUX3, *NAME_HINT_ORDER)  # "flux3" before FLUX.1's "flux"
CLASS_MARKER_ORDER: tuple[Family, ...] = (
    FLUX2_KLEIN,
    FLUX2_DEV,
    ZIMAGE,
    QWENIMAGE,
    QWENIMAGE_EDIT,
    KREA2,
    QWENIMAGE21,
    WAN,
    LTX2,
    MINIMAX,  # before SD3, whose marker "3" is in MiniMaxH3ModularPipeline
    SDXL,
    SD3,
    FLUX,
    PIXART_SIGMA,
    SD,
)
CLASS_MARKER_ORDER = (FLUX3, *CLASS_MARKER_ORDER)  # "Flux3" before SD3's "3" and FLUX.1's "Flux"


@dataclass(frozen=True)
class CheckpointLayout:
    """An original-format (CompVis/SGM) single-file checkpoint layout: a variant of one family."""

    name: str  # "sd1", "sd2", "sdxl"
    family: Family
    # The shipped config-only folder under resources/configs/ (None: none shipped, e.g. SD 2.x).
    config_folder: str | None
    # Key prefix of each text encoder, in the order of `family.text_encoders`.
    text_encoder_prefixes: tuple[str, ...]
    # Slots holding an OpenCLIP encoder (fused in_proj, transposed projection), converted accordingly.
    open_clip_slots: tuple[int, ...] = ()


CHECKPOINT_LAYOUTS: dict[str, CheckpointLayout] = {
    c.name: c
    for c in (
        CheckpointLayout("sd1", SD, "sd15", ("cond_stage_model.transformer.",)),
        CheckpointLayout("sd2", SD, None, ("cond_stage_model.model.",)),
        CheckpointLayout(
            "sdxl",
            SDXL,
            "sdxl",
            ("conditioner.embedders.0.transformer.", "conditioner.embedders.1.model."),
            open_clip_slots=(1,),
        ),
        # ComfyUI's all-in-one files (comfy/supported_models.py: text encoders under `text_encoders.`, the
        # VAE under `vae.` for FLUX.1 and `first_stage_model.` for SD3); read by `single_file_flow`.
        CheckpointLayout(
            "flux1", FLUX, "flux", ("text_encoders.clip_l.transformer.", "text_encoders.t5xxl.transformer.")
        ),
        CheckpointLayout(
            "sd3",
            SD3,
            "sd3.5-large",
            (
                "text_encoders.clip_l.transformer.",
                "text_encoders.clip_g.transformer.",
                "text_encoders.t5xxl.transformer.",
            ),
        ),
    )
}


class UnsupportedModelError(ValueError):
    """The files are a diffusion model of a family Nodeloom cannot run (yet)."""


def family_for_pipeline_class(class_name: str) -> Family:
    for family in FAMILIES.values():
        if class_name in family.pipeline_classes:
            return family
    known = ", ".join(c for f in FAMILIES.values() for c in f.pipeline_classes)
    raise UnsupportedModelError(f"pipeline class {class_name!r} is not supported (supported: {known})")


def detect_single_file_family(keys: Iterable[str]) -> str:
    """Which original-format (CompVis/SGM) checkpoint this is, from its tensor names alone.

    Returns "sd1", "sd2", "sdxl", or "flux1" / "sd3" (ComfyUI's all-in-one files); raises
    `UnsupportedModelError` for others. Names, not shapes, so tiny
    test checkpoints are recognised like real ones. diffusers' `infer_diffusers_model_type` relies on
    layer-9 keys and widths that tiny models do not have.
    """
    keys = set(keys)

    def has_prefix(prefix: str) -> bool:
        return any(k.startswith(prefix) for k in keys)

    if has_prefix("model.diffusion_model.joint_blocks."):
        return _all_in_one("sd3", keys)
    if has_prefix("joint_blocks."):
        raise UnsupportedModelError(
            "this is a Stable Diffusion 3 transformer file (no text encoders or VAE): load it with Load Denoiser"
        )
    if has_prefix("noise_refiner.") or has_prefix("model.diffusion_model.noise_refiner."):
        raise UnsupportedModelError(
            "this is a Z-Image checkpoint; single-file Z-Image is not supported yet (load its diffusers folder)"
        )
    if has_prefix("txt_norm.") or has_prefix("model.diffusion_model.txt_norm."):
        raise UnsupportedModelError(
            "this is a Qwen-Image checkpoint; single-file Qwen-Image is not supported yet (load its diffusers folder)"
        )
    if has_prefix("text_fusion.") or has_prefix("model.diffusion_model.text_fusion."):
        raise UnsupportedModelError(
            "this is a Krea 2 transformer; single-file Krea 2 is not supported yet (load its diffusers folder)"
        )
    if has_prefix("double_stream_modulation_img.") or has_prefix(
        "model.diffusion_model.double_stream_modulation_img."
    ):
        raise UnsupportedModelError(
            "this is a FLUX.2 transformer; single-file FLUX.2 is not supported yet (load its diffusers folder)"
        )
    if has_prefix("model.diffusion_model.av_ca_a2v_gate_adaln_single.") or has_prefix(
        "av_ca_a2v_gate_adaln_single."
    ):
        raise UnsupportedModelError(
            "this is an LTX-2 checkpoint; single-file LTX-2 is not supported yet (load its diffusers folder)"
        )
    if has_prefix("model.diffusion_model.double_blocks."):  # after FLUX.2, whose files have double_blocks too
        return _all_in_one("flux1", keys)
    if has_prefix("double_blocks."):
        raise UnsupportedModelError(
            "this is a Flux transformer file (no text encoders or VAE): load it with Load Denoiser"
        )
    if not has_prefix("model.diffusion_model."):
        raise UnsupportedModelError("no UNet weights (model.diffusion_model.*): not an SD/SDXL checkpoint")
    if has_prefix("conditioner.embedders.1.model."):
        return "sdxl"
    if has_prefix("conditioner.embedders.0.model."):
        raise UnsupportedModelError("this is an SDXL refiner checkpoint; refiners are not supported yet")
    if has_prefix("cond_stage_model.model."):
        return "sd2"
    if has_prefix("cond_stage_model.transformer."):
        return "sd1"
    raise UnsupportedModelError("no text encoder weights found: not a full SD/SDXL checkpoint")


def _all_in_one(layout: str, keys: set[str]) -> str:
    """A ComfyUI all-in-one layout id, once the file is seen to hold text encoders beside its transformer."""
    if not any(k.startswith("text_encoders.") for k in keys):  # a prefixed transformer alone
        title = "Stable Diffusion 3" if layout == "sd3" else "FLUX.1"
        raise UnsupportedModelError(
            f"this {title} file holds a transformer but no text encoders (text_encoders.*): load it with "
            "Load Denoiser, and its text encoders and VAE from their own files"
        )
    return layout


def denoiser_stream_blocks(family: Family, config: dict[str, Any]) -> tuple[str, ...]:
    """The lists the memory manager may stream, at resnet/attention granularity for UNets.

    Streaming keeps a window of the two largest declared blocks on the device; a whole UNet stage is
    ~40% of SD's weights, so declaring stages would leave `stream` little to save (memory/README.md).
    Listed in execution order: down stages, mid block, up stages.
    """
    if family.denoiser_ref.name != "UNet2DConditionModel":
        return family.denoiser_blocks

    def parts(prefix: str, block_type: str | None) -> list[str]:
        if not block_type:
            return []
        return [f"{prefix}.resnets"] + ([f"{prefix}.attentions"] if "CrossAttn" in block_type else [])

    paths = [p for i, t in enumerate(config["down_block_types"]) for p in parts(f"down_blocks.{i}", t)]
    paths += parts("mid_block", config.get("mid_block_type", "UNetMidBlock2DCrossAttn"))
    paths += [p for i, t in enumerate(config["up_block_types"]) for p in parts(f"up_blocks.{i}", t)]
    return tuple(paths)


def resolve_dtype(choice: str, family: Family, device: torch.device | str) -> torch.dtype:
    """ "auto" -> float32 on CPU (half is ~55x slower there), the family's usual half type on CUDA."""
    return dtype_for_device(choice, device, family.cuda_dtype)
