"""Wan image-to-video inputs: the start (and last) frame encoded as the transformer's extra input channels,
and Wan 2.1 I2V's CLIP image embeddings.

Lives here: `ImageEncoderRef`, `ClipVisionOutput`, `wan_image_latents`, `wan22_image_latent`, `encode_clip_images`,
`i2v_extra_channels`. May import:
stdlib, torch, PIL, transformers, memory, pipelines.diffusion.values / resize.

Written out from diffusers' `WanImageToVideoPipeline.prepare_latents` and `encode_image`. The conditioning video
is the start frame, then zeros, then (first-last-frame) the last frame, at the video's size in [-1, 1]; the VAE
encodes it (the distribution's mode) and it is scaled as the denoiser sees latents. Beside it goes a mask, 1 on
the given frames, folded into the VAE's time step: `scale_factor_temporal` channels per latent frame (the
first latent frame stands for one picture frame, repeated to fill them). Both travel on the latent wire as
`Latents.concat` (mask first), so the sampler concatenates [noise, mask, encoded] as the pipeline does. Wan 2.1
I2V (a transformer with `image_dim`) also cross-attends to the second-to-last hidden states of a CLIP vision
encoder shipped in the folder; the pictures go along as `Latents.clip_images` and the sampler encodes them
with the denoiser's `image_encoder`, from the uint8 picture as the pipeline's processor sees a PIL image.
Wan 2.2 TI2V-5B instead takes the start image's latents as its first latent frame (`wan22_image_latent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory import MemoryManager, ModelHandle, Working
from pipelines.diffusion.values import Latents, VaeRef


@dataclass(frozen=True)
class ImageEncoderRef:
    """Wan 2.1 I2V's CLIP vision encoder (the folder's `image_encoder`) and where its processor lives."""

    handle: ModelHandle
    root: Path  # the folder: `image_processor/` holds the CLIPImageProcessor settings
    config: dict[str, Any]
    dtype: torch.dtype


@dataclass(frozen=True)
class ClipVisionOutput:
    """ComfyUI's CLIP_VISION_OUTPUT here: the encoder and the picture (H, W, 3) in [0, 1] it is to encode; the
    Wan sampler encodes it where it needs the states (`encode_clip_images`)."""

    encoder: ImageEncoderRef
    picture: torch.Tensor


def _pixels(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """IMAGE (B, H, W, 3) in [0, 1] -> (1, 3, height, width) in [-1, 1], resized as the pipeline's
    VideoProcessor resizes a PIL picture (Lanczos) when the size differs."""
    from pipelines.diffusion.resize import resize_image

    picture = image[:1, ..., :3].float()
    if picture.shape[1:3] != (height, width):
        picture = resize_image(picture, height, width, "lanczos")
    return picture.permute(0, 3, 1, 2) * 2.0 - 1.0


def _encode_working(vae: VaeRef, frames: int, height: int, width: int) -> Working:
    # The Wan VAE encoder runs a few frames at a time with a causal cache, like the decoder: its peak grows with
    # the picture. The decoder's fitted figure per output pixel per base channel stands in (not measured for the
    # encoder), plus the (3, frames, H, W) input.
    from pipelines.diffusion.video_vae import _PER_PIXEL_PER_BASE

    base = int(vae.config.get("base_dim", 96))
    elements = _PER_PIXEL_PER_BASE * base * height * width + 3 * frames * height * width
    return Working(elements * torch.finfo(vae.dtype).bits // 8, f"1x{frames}x{height}x{width}")


@torch.no_grad()
def wan_image_latents(
    mm: MemoryManager,
    vae: VaeRef,
    start: torch.Tensor,
    *,
    width: int,
    height: int,
    frames: int,
    batch: int = 1,
    last: torch.Tensor | None = None,
) -> Latents:
    """An empty (batch, C, latent frames, h, w) latent carrying the start/last-frame conditioning."""
    from pipelines.diffusion.video_vae import video_latent_shape

    _, channels, latent_frames, h, w = video_latent_shape(vae.config, width, height, frames)
    temporal = int(vae.config.get("scale_factor_temporal", 4))
    if last is not None and frames < 2:
        raise ValueError("field 'length': a first and a last frame need a video of 2 frames or more")

    # 1. The conditioning video: start frame, zeros, [last frame], in [-1, 1]
    first = _pixels(start, height, width).unsqueeze(2)  # (1, 3, 1, H, W)
    zeros = first.new_zeros(1, 3, frames - 1 - (last is not None), height, width)
    parts = [first, zeros] + ([_pixels(last, height, width).unsqueeze(2)] if last is not None else [])
    video = torch.cat(parts, dim=2)

    # 2. Its latents, the mode of the VAE's distribution, scaled as the pipeline scales them
    with mm.use(vae.handle, working=_encode_working(vae, frames, height, width)) as model:
        encoded = model.encode(video.to(device=mm.device, dtype=vae.dtype)).latent_dist.mode()
    encoded = encoded.to(dtype=torch.float32)
    mean = (
        torch.tensor(vae.config["latents_mean"]).view(1, channels, 1, 1, 1).to(encoded.device, torch.float32)
    )
    inv_std = 1.0 / torch.tensor(vae.config["latents_std"]).view(1, channels, 1, 1, 1).to(encoded.device)
    encoded = ((encoded - mean) * inv_std).cpu()

    # 3. The mask: 1 on the given frames, the first repeated to fill its latent frame's time step
    mask = torch.ones(1, 1, frames, h, w)
    mask[:, :, 1 : frames - 1 if last is not None else frames] = 0
    mask = torch.cat([mask[:, :, :1].repeat_interleave(temporal, dim=2), mask[:, :, 1:]], dim=2)
    mask = mask.view(1, -1, temporal, h, w).transpose(1, 2)  # (1, temporal, latent frames, h, w)
    assert mask.shape[2] == encoded.shape[2] == latent_frames

    pictures = tuple(p[0, ..., :3].float() for p in (start, last) if p is not None)
    return Latents(
        samples=torch.zeros(batch, channels, latent_frames, h, w),
        vae_scale_factor=vae.scale_factor,
        source="empty",
        concat=torch.cat([mask, encoded], dim=1),
        clip_images=pictures,
    )


@torch.no_grad()
def wan22_image_latent(
    mm: MemoryManager,
    vae: VaeRef,
    start: torch.Tensor | None,
    *,
    width: int,
    height: int,
    frames: int,
    batch: int = 1,
) -> Latents:
    """Wan 2.2 TI2V's latent: zeros, or with a start image its latents as the first latent frame and a noise
    mask that keeps them (0 there, 1 elsewhere), as `WanImageToVideoPipeline` with `expand_timesteps`."""
    from pipelines.diffusion.video_vae import video_latent_shape

    _, channels, latent_frames, h, w = video_latent_shape(vae.config, width, height, frames)
    samples = torch.zeros(batch, channels, latent_frames, h, w)
    if start is None:  # text-to-video: an empty latent
        return Latents(samples=samples, vae_scale_factor=vae.scale_factor, source="empty")
    first = _pixels(start, height, width).unsqueeze(2)  # (1, 3, 1, H, W): the image alone is encoded
    with mm.use(vae.handle, working=_encode_working(vae, 1, height, width)) as model:
        encoded = model.encode(first.to(device=mm.device, dtype=vae.dtype)).latent_dist.mode()
    encoded = encoded.to(dtype=torch.float32)
    mean = (
        torch.tensor(vae.config["latents_mean"]).view(1, channels, 1, 1, 1).to(encoded.device, torch.float32)
    )
    inv_std = 1.0 / torch.tensor(vae.config["latents_std"]).view(1, channels, 1, 1, 1).to(encoded.device)
    samples[:, :, :1] = ((encoded - mean) * inv_std).cpu()
    keep = torch.ones(1, 1, latent_frames, h, w)
    keep[:, :, 0] = 0
    return Latents(samples=samples, vae_scale_factor=vae.scale_factor, source="encoded", noise_mask=keep)


def i2v_extra_channels(config: dict[str, Any], latent_channels: int) -> int:
    """How many input channels past the noise a Wan transformer takes (0: text-to-video)."""
    return int(config.get("in_channels", latent_channels)) - latent_channels


def _clip_working(config: dict[str, Any], count: int, dtype: torch.dtype) -> Working:
    # A ViT layer's peak: the (heads, tokens, tokens) scores and their softmax beside a few (tokens, width) and one
    # (tokens, intermediate) state. Not fitted on the meta device: the encoder is small beside the transformer.
    tokens = (int(config.get("image_size", 224)) // int(config.get("patch_size", 14))) ** 2 + 1
    heads, width = int(config.get("num_attention_heads", 16)), int(config.get("hidden_size", 1280))
    inner = int(config.get("intermediate_size", 5120))
    elements = count * (2 * heads * tokens * tokens + 4 * tokens * width + tokens * inner)
    return Working(elements * torch.finfo(dtype).bits // 8, f"{count}x{tokens}")


@torch.no_grad()
def encode_clip_images(
    mm: MemoryManager, ref: ImageEncoderRef, pictures: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """(N, tokens, width): the CLIP vision encoder's second-to-last hidden states for each picture, as
    `WanImageToVideoPipeline.encode_image` (the folder's processor on the uint8 picture)."""
    from PIL import Image
    from transformers import CLIPImageProcessor

    processor = CLIPImageProcessor.from_pretrained(
        str(ref.root), subfolder="image_processor", local_files_only=True
    )
    images = [Image.fromarray(p.clamp(0, 1).mul(255).round().to(torch.uint8).numpy()) for p in pictures]
    inputs = processor(images=images if len(images) > 1 else images[0], return_tensors="pt")
    with mm.use(ref.handle, working=_clip_working(ref.config, len(images), ref.dtype)) as model:
        pixel_values = inputs["pixel_values"].to(device=mm.device, dtype=ref.dtype)
        states = model(pixel_values=pixel_values, output_hidden_states=True).hidden_states[-2]
    return states
