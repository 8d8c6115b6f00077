"""The types a model family is declared with: `Family`, `TextEncoderSlot` and `ClassRef` (with `_diffusers` /
`_transformers`, the two places a class is named from). May import: stdlib only at module level; the named
class is imported when it is first asked for.

`pipelines.diffusion.families` holds the one registry of families built from these (and re-exports them);
this module is only their shape, so the registry stays a list of entries one can read in a sitting.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ClassRef:
    """A class named by module and attribute, imported when `load()` is first called."""

    module: str
    name: str

    def load(self) -> type:
        if self.module.split(".")[0] == "diffusers":
            from pipelines.diffusion.lazy_models import install

            install()  # the class's own model file, not its package's every model
        return getattr(importlib.import_module(self.module), self.name)


def _diffusers(name: str) -> ClassRef:
    return ClassRef("diffusers", name)


def _transformers(name: str) -> ClassRef:
    return ClassRef("transformers", name)


@dataclass(frozen=True)
class TextEncoderSlot:
    """One text encoder of a family and the tokenizer in front of it (subfolders of a diffusers folder)."""

    subfolder: str  # "text_encoder", "text_encoder_2"
    tokenizer_subfolder: str  # "tokenizer", "tokenizer_2"
    model_ref: ClassRef
    # Layer lists the memory manager may stream (attribute paths on the model), for encoders too large to
    # hold whole in a small budget (Z-Image's 4B Qwen3); CLIP and T5 load whole.
    blocks: tuple[str, ...] = ()

    @property
    def model_class(self) -> type:
        return self.model_ref.load()


@dataclass(frozen=True)
class Family:
    name: str  # "sd", "sdxl", "pixart_sigma", "sd3", "flux", "zimage"
    title: str
    pipeline_classes: tuple[str, ...]  # model_index.json `_class_name` values of this family
    denoiser_subfolder: str  # "unet" / "transformer"
    denoiser_ref: ClassRef
    text_encoders: tuple[TextEncoderSlot, ...]
    # The half type the family is published and usually run in on CUDA (CPU always runs float32: FINDINGS),
    # as a torch attribute name ("float16").
    cuda_dtype_name: str
    # Longest prompt in tokens; None means the tokenizer's own `model_max_length` (77 for CLIP).
    max_text_tokens: int | None
    # Latent (C) -> RGB projection for previews, from ComfyUI's latent_formats (fitted on real VAEs).
    latent_rgb_factors: tuple[tuple[float, float, float], ...]
    latent_rgb_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    vae_ref: ClassRef = ClassRef("diffusers", "AutoencoderKL")
    # Blocks the memory manager may stream one at a time (attribute names on the denoiser).
    denoiser_blocks: tuple[str, ...] = ("down_blocks", "up_blocks")
    # Flow matching (rectified flow, Flux/SD3): a different loop and only flow-matching schedulers.
    flow: bool = False
    # The picture size the family is trained at, and the step width/height must be a multiple of
    # (VAE downscale x the denoiser's patch size). A model folder's own configs override these.
    native_size: int = 512
    size_multiple: int = 8
    # Text tokens that join the image tokens in every attention (SD3, Flux: joint attention), which the
    # working-memory estimate counts; 0 where text comes in by cross-attention only (UNets, PixArt).
    joint_text_tokens: int = 0
    # How a prompt is encoded (a name in `pipelines.diffusion.conditioning.PROMPT_ENCODERS`).
    prompt_encoder: str = "clip"
    # How the denoiser is called and which loop runs it: "unet" (the scheduler loop), "pixart" (that loop,
    # a per-sample timestep and a (noise, variance) output), "sd3" / "flux" / "zimage" (their flow-matching
    # loops; "qwenimage" too; `pipelines.diffusion.denoising.sample` dispatches on it).
    denoiser_call: str = "unet"
    # SDXL's micro-conditioning: pooled text embeds and the size/crop `time_ids` go in beside the prompt.
    size_conditioning: bool = False
    # The loop packs 2x2 latent pixels into one token (Flux, whose config says patch_size 1; Qwen-Image), so
    # the config's in_channels counts packed channels (4x the latent's).
    packs_latents: bool = False
    # How a LoRA file's keys are read: "standard" (kohya or PEFT), "sd3", "flux" (lora_formats.read_lora).
    lora_layout: str = "standard"
    # The config-only diffusers folder shipped under resources/configs/ for split component files.
    config_folder: str | None = None
    # File-name fragments (lower case) that hint at the family when the file itself is not at hand.
    name_markers: tuple[str, ...] = ()
    # A diffusers folder's `_class_name` containing this names the family (`family_detect`).
    class_marker: str = ""
    # Video families: the frame rate their pipelines make and export at (VAE Decode Video's fps 0).
    video_fps: float = 16.0
    # ComfyUI's cfg minus this is the family's `cfg`: 1 where the pipeline guides as pos + g * (pos - neg)
    # (Z-Image, Krea 2), which is ComfyUI's neg + cfg * (pos - neg) at g = cfg - 1 (its cfg 1: no guidance).
    comfy_cfg_offset: float = 0.0

    @property
    def text_encoder_files(self) -> tuple[int, int]:
        """(CLIP encoders, T5 encoders): what a set of separate text encoder files of this family holds."""
        names = [slot.model_ref.name for slot in self.text_encoders]
        return sum(n.startswith("CLIP") for n in names), sum(n.startswith("T5") for n in names)

    @property
    def split_text_encoders(self) -> bool:
        """Whether separate text encoder files can stand for this family's encoders (all CLIP or T5: the
        layouts `pipelines.quant.split_files` reads); Z-Image's Qwen3 comes from its diffusers folder."""
        return sum(self.text_encoder_files) == len(self.text_encoders)

    @property
    def has_clip(self) -> bool:
        return self.text_encoder_files[0] > 0

    @property
    def denoiser_class(self) -> type:
        return self.denoiser_ref.load()

    @property
    def vae_class(self) -> type:
        return self.vae_ref.load()

    @property
    def cuda_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.cuda_dtype_name)
