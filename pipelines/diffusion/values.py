"""The values that travel on diffusion wires: model references, conditioning and latents.

Lives here: `DenoiserRef`, `TextEncoderRef`, `VaeRef`, `AudioDecoderRef`, `ltx2_vae_ratios`, `TokenizerSource`, `LoraPatch`, `Conditioning`,
`Latents`, `vae_scale_factor` and `DEFAULT_VAE_SCALE` (the one formula for pixels per latent).
May import: stdlib, torch, transformers, memory, pipelines.diffusion.families / family_types / qwen_vl_counts.

Model references hold `memory.ModelHandle`s (lazy: registered with the memory manager, loaded only inside
`mm.use(...)`), never modules. Data values hold CPU-or-device tensors and the family they belong to, so a
sampler can refuse an SDXL conditioning fed to an SD1 UNet with a clear message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pipelines.diffusion.families import Family
from pipelines.diffusion.family_types import ClassRef

if TYPE_CHECKING:
    from memory import ModelHandle
    from pipelines.diffusion.qwen_vl_counts import TokenCounter


class TokenizerSource:
    """Where a tokenizer lives; loads it on first use and keeps it (tokenizers are small, and CPU-only)."""

    def __init__(self, path: Path, subfolder: str, model_class: type | ClassRef) -> None:
        self.path = path
        self.subfolder = subfolder
        self._model_class = model_class  # a ClassRef is imported when asked for (`app plan` never asks)
        self._tokenizer: Any = None
        self._counters: dict[Path, TokenCounter] = {}

    @property
    def model_class(self) -> type:
        cls = self._model_class
        return cls.load() if isinstance(cls, ClassRef) else cls

    @property
    def max_length(self) -> int:
        """The tokenizer's `model_max_length`, read from its tokenizer_config.json (`app plan` asks for it and
        never builds a tokenizer: transformers' import is a second); the built tokenizer's when not there."""
        import json

        config = self.path / self.subfolder / "tokenizer_config.json"
        if self._tokenizer is None and config.is_file():
            value = json.loads(config.read_text(encoding="utf-8")).get("model_max_length")
            if isinstance(value, int):
                return value
        return int(self.load().model_max_length)

    def load(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(
                str(self.path), subfolder=self.subfolder, local_files_only=True
            )
        return self._tokenizer

    def counter(self, folder: Path | None = None) -> TokenCounter:
        """A token counter for this tokenizer's tokenizer.json without transformers (`app plan` counts a
        prompt's tokens with it), or for `folder`'s (a processor/ beside it); each read once and kept: a
        real Qwen tokenizer.json takes tenths of a second to parse."""
        from pipelines.diffusion.qwen_vl_counts import token_counter

        folder = self.path / self.subfolder if folder is None else folder
        if folder not in self._counters:
            self._counters[folder] = token_counter(folder)
        return self._counters[folder]

    def __repr__(self) -> str:
        return f"TokenizerSource({str(self.path)!r}, {self.subfolder!r})"


# SD's VAE (4 blocks): the pixels per latent assumed where no VAE config is at hand.
DEFAULT_VAE_SCALE = 8


def vae_scale_factor(vae_config: dict[str, Any]) -> int:
    """Pixels per latent: 2 ** (number of VAE blocks - 1), as diffusers pipelines compute it. The one formula:
    `assembly` gives a denoiser its factor with it, and `VaeRef.scale_factor` reads it."""
    if "scale_factor_spatial" in vae_config:  # the Wan VAE says it (its blocks are `dim_mult`)
        return int(vae_config["scale_factor_spatial"])
    if "spatial_downsample_factors" in vae_config:  # MiniMax H3's video VAE: the product of its stages
        return int(math.prod(int(f) for f in vae_config["spatial_downsample_factors"]))
    if "spatio_temporal_scaling" in vae_config:  # the LTX-2 video VAE, as its `spatial_compression_ratio`
        return ltx2_vae_ratios(vae_config)[0]
    if "temperal_downsample" in vae_config:  # Qwen-Image's 3D VAE: one 2x downsampling per entry
        return 2 ** len(vae_config["temperal_downsample"])
    return 2 ** (len(vae_config.get("block_out_channels", (0, 0, 0, 0))) - 1)


def ltx2_vae_ratios(vae_config: dict[str, Any]) -> tuple[int, int]:
    """(pixels, frames) per latent of an LTX-2 video VAE, as `AutoencoderKLLTX2Video.__init__` computes them."""
    scaling = vae_config.get("spatio_temporal_scaling", (True, True, True, True))
    steps = sum(scaling) if isinstance(scaling, (list, tuple)) else len(vae_config["layers_per_block"]) - 1
    spatial = vae_config.get("spatial_compression_ratio") or int(vae_config.get("patch_size", 4)) * 2**steps
    temporal = (
        vae_config.get("temporal_compression_ratio") or int(vae_config.get("patch_size_t", 1)) * 2**steps
    )
    return int(spatial), int(temporal)


@dataclass(frozen=True)
class LoraPatch:
    """One LoRA file at one strength, attached to a model reference; applied when the model is placed.

    `stamp` (mtime_ns, size) makes a file retrained under the same name a different patch.
    """

    path: Path
    strength: float
    stamp: tuple[int, int] = (0, 0)
    # Which models the file has layers for ("denoiser", "text_encoder", ...); empty: not known yet.
    targets: tuple[str, ...] = ()
    allow_pickle: bool = False  # the user's opt-in, for a LoRA that is a pickle (read again when placed)

    @property
    def label(self) -> str:
        return f"{self.path.name} x{self.strength:g}"


@dataclass(frozen=True)
class DenoiserRef:
    """A UNet or DiT, lazily loaded, plus what a sampler needs to know without loading it."""

    handle: ModelHandle
    family: Family
    config: dict[str, Any]  # the model's config.json (in_channels, sample_size, block_out_channels, ...)
    scheduler_config: dict[str, Any]  # the folder's scheduler_config.json: betas, prediction type, ...
    dtype: torch.dtype
    vae_scale_factor: int = DEFAULT_VAE_SCALE  # pixels per latent (from the VAE config when known)
    patches: tuple[LoraPatch, ...] = ()  # LoRAs in the order they stack (LoadLoRA nodes)
    # Wan 2.2's low-noise expert (`transformer_2`), which takes over below `boundary_ratio` x 1000 timesteps.
    low_noise: DenoiserRef | None = None
    boundary_ratio: float | None = None
    # Wan 2.1 I2V's CLIP vision encoder (`pipelines.diffusion.wan_image.ImageEncoderRef`), when the folder has one.
    image_encoder: Any = None
    # Wan 2.2 TI2V (model_index.json `expand_timesteps`): a timestep per video token; 0 on an image's frame.
    expand_timesteps: bool = False
    # LTX-2's guidance terms besides cfg (`ltx2_sampling.LTX2Guidance`, set by the LTX-2 Guidance node); None:
    # the pipeline's defaults.
    ltx2_guidance: Any = None
    # MiniMax H3's reference-to-video partition (a folder's `transformer_ref/`), used for a ref2va request.
    reference: DenoiserRef | None = None


@dataclass(frozen=True)
class TextEncoderRef:
    """One or more text encoders that a prompt goes through together (SDXL: two on one wire)."""

    handles: tuple[ModelHandle, ...]
    tokenizers: tuple[TokenizerSource, ...]
    family: Family
    dtype: torch.dtype
    patches: tuple[LoraPatch, ...] = ()  # LoRAs in the order they stack (LoadLoRA nodes)
    # ComfyUI's CLIPSetLastLayer: -1 = last layer, -2 = the one before, ...; None = the family's usual layer
    clip_skip: int | None = None


@dataclass(frozen=True)
class AudioDecoderRef:
    """LTX-2's audio VAE and vocoder (latent spectrogram -> mel -> waveform), or MiniMax H3's audio VAE alone
    (latents -> waveform), lazily loaded."""

    vae: ModelHandle
    vae_config: dict[str, Any]
    vocoder: ModelHandle | None  # None: the audio VAE makes the waveform itself (MiniMax H3)
    vocoder_config: dict[str, Any]
    dtype: torch.dtype


@dataclass(frozen=True)
class VaeRef:
    handle: ModelHandle
    family: Family
    config: dict[str, Any]
    dtype: torch.dtype
    audio: AudioDecoderRef | None = None  # LTX-2: the sound track's decoder, beside the video VAE

    @property
    def scale_factor(self) -> int:
        return vae_scale_factor(self.config)

    @property
    def latent_channels(self) -> int:
        return int(self.config.get("latent_channels", self.config.get("z_dim", 4)))  # z_dim: Wan, Qwen-Image


@dataclass(frozen=True)
class Conditioning:
    """An encoded prompt: per-token embeddings (B, S, D), plus the pooled vector (SDXL) or mask (T5)."""

    embeds: torch.Tensor  # (B, S, D)
    family: str
    pooled: torch.Tensor | None = None  # (B, P) SDXL: text_encoder_2's projected EOS embedding
    attention_mask: torch.Tensor | None = None  # (B, S) T5 families: 1 for real tokens
    text: str = ""
    # ControlNet hints (pipelines.diffusion.controlnet.ControlHint) applied with this prompt; they stack.
    controls: tuple[Any, ...] = ()
    # Reference pictures' LATENTs for editing (FLUX.2: `Flux2KleinPipeline(image=...)`), in order.
    references: tuple[Any, ...] = ()
    # ComfyUI's `reference_latents_method` (FluxKontextMultiReferenceLatentMethod) when one was set: Krea 2
    # reads its references only with one; the other families place theirs as their pipelines do.
    reference_method: str | None = None
    # LTX-2: the connectors' per-token embeddings for the audio stream (`embeds` are the video stream's).
    audio_embeds: torch.Tensor | None = None
    # MiniMax H3: each row's modality tag (1 text, 0 a keyframe's vision block), which the transformer reads.
    token_tags: torch.Tensor | None = None
    # Qwen-Image 2.1: (1, S) bool, True at the prompt's image slots (each a 2x2 group of reference latents).
    image_slots: torch.Tensor | None = None


@dataclass(frozen=True)
class Latents:
    """Latents as the denoiser sees them: VAE output already multiplied by the scaling factor."""

    samples: torch.Tensor  # (B, C, H / scale, W / scale)
    vae_scale_factor: int = DEFAULT_VAE_SCALE
    # Where the samples came from: "empty" (EmptyLatent: only the shape matters), "encoded" (VAEEncode),
    # "sampled" (a sampler's output).
    source: str = "empty"
    # Inpainting with an ordinary model: (B or 1, 1, H / scale, W / scale), 1 = repaint, 0 = keep the samples.
    noise_mask: torch.Tensor | None = None
    # Inpainting models: extra input channels (mask + masked-picture latents) concatenated to the latents.
    concat: torch.Tensor | None = None
    # Wan 2.1 I2V: the start (and last) picture, each (H, W, 3) in [0, 1], for the denoiser's image encoder.
    clip_images: tuple[torch.Tensor, ...] = ()
    # ...and the encoder for them when it is not the denoiser's own (a CLIP vision file: nodes/clip_vision.py).
    clip_encoder: Any = None
    # LTX-2: the sound track's latents (B, C, audio latent frames, mel bins), normalised as the transformer
    # sees them once packed, and the frame rate both were sized for (it also conditions the positions).
    audio: torch.Tensor | None = None
    fps: float | None = None
    # LTX-2 image-to-video: (B, 1, latent frames, h, w), the pipeline's conditioning mask: 1 = keep the samples
    # (the encoded first frame), 0 = denoise from noise.
    keep_mask: torch.Tensor | None = None
    # MiniMax H3 image-to-video: the keyframes as (anchor "first" / "last", normalised latent (1, C, 1, h, w)),
    # in packed order; they ride in the sequence as anchors the loop never writes.
    keyframes: tuple[tuple[str, torch.Tensor], ...] = ()

    @property
    def pixel_size(self) -> tuple[int, int]:
        """(height, width) in pixels."""
        return self.samples.shape[-2] * self.vae_scale_factor, self.samples.shape[-1] * self.vae_scale_factor
