"""What ComfyUI's separate LTX-2 latent nodes do, on our `Latents` value: video-only and audio-only latents,
joining and splitting them, the audio decode, the picture pre-compression and the in-place first frame.

Lives here: `empty_video_latent`, `empty_audio_latent`, `concat_av`, `separate_av`, `decode_audio_latent`,
`preprocess_images`, `image_in_place`. May import: torch, numpy, diffusers, PIL, memory,
pipelines.video.value, pipelines.diffusion.values / ltx2_vae / ltx2_nodes.

ComfyUI carries LTX-2's two latents as one "AV" latent (LTXVConcatAVLatent) that a sampler denoises together
and LTXVSeparateAVLatent splits again; our `Latents` already holds both (`samples` the video, `audio` the sound
track), so: a video latent is one with `audio` None; an audio latent has `samples` = `audio` (the same
(1, C, L, mel) tensor, so any node sees a tensor); the joined one has both. The frame rate travels with them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from memory import MemoryManager
from pipelines.diffusion.ltx2_nodes import PIPELINE_MULTIPLE
from pipelines.diffusion.ltx2_vae import (
    AUDIO_LATENT_DOWNSAMPLE,
    audio_latent_frames,
    decode_ltx2_audio,
    encode_ltx2_image,
    ltx2_latent_shapes,
)
from pipelines.diffusion.values import Latents, VaeRef
from pipelines.video.value import Audio


def empty_video_latent(vae: VaeRef, width: int, height: int, frames: int, fps: float) -> Latents:
    """Zeros shaped as LTX-2's video latent (no sound track: join one with `concat_av`)."""
    if width % PIPELINE_MULTIPLE or height % PIPELINE_MULTIPLE:
        raise ValueError(
            f"fields 'width', 'height': must be multiples of {PIPELINE_MULTIPLE} for LTX-2, got {width}x{height}"
        )
    video, _ = ltx2_latent_shapes(replace(vae, audio=None), width, height, frames, fps)
    return Latents(samples=torch.zeros(video), vae_scale_factor=vae.scale_factor, source="empty", fps=fps)


def empty_audio_latent(vae: VaeRef, frames: int, fps: float) -> Latents:
    """Zeros shaped as the sound track's latent for `frames` video frames at `fps` (the pipeline's sizes)."""
    if vae.audio is None:
        raise ValueError("input 'vae': this LTX-2 VAE has no audio VAE/vocoder (load the model's audio VAE)")
    config = vae.audio.vae_config
    shape = (
        1,
        int(config.get("latent_channels", 8)),
        audio_latent_frames(vae.audio, frames, fps),
        int(config.get("mel_bins", 64)) // AUDIO_LATENT_DOWNSAMPLE,
    )
    zeros = torch.zeros(shape)
    return Latents(samples=zeros, vae_scale_factor=vae.scale_factor, source="empty", audio=zeros, fps=fps)


def concat_av(video: Latents, audio: Latents) -> Latents:
    """The joint latent a sampler denoises: `video`'s frames (and kept first frame) with `audio`'s sound track."""
    if video.samples.ndim != 5:
        raise ValueError(
            f"input 'video_latent': a video latent (1, C, F, h, w), got {tuple(video.samples.shape)}"
        )
    if audio.audio is None:
        raise ValueError("input 'audio_latent': not an LTX-2 audio latent (Empty LTXV Audio Latent)")
    return replace(video, audio=audio.audio, fps=audio.fps or video.fps)


def separate_av(latent: Latents) -> tuple[Latents, Latents]:
    """(video latent, audio latent) of a joint one."""
    if latent.audio is None:
        raise ValueError(
            "input 'av_latent': this latent has no sound track (not an LTX-2 audio-video latent)"
        )
    video = replace(latent, audio=None)
    audio = Latents(
        samples=latent.audio,
        vae_scale_factor=latent.vae_scale_factor,
        source=latent.source,
        audio=latent.audio,
        fps=latent.fps,
    )
    return video, audio


def decode_audio_latent(mm: MemoryManager, vae: VaeRef, latent: Latents) -> Audio:
    """The sound track as an AUDIO value (the waveform clipped to [-1, 1], as VAE Decode Video's)."""
    if vae.audio is None:
        raise ValueError("input 'vae': this LTX-2 VAE has no audio VAE/vocoder")
    if latent.audio is None:
        raise ValueError("input 'latent': no sound track in this latent (an LTX-2 audio latent is needed)")
    wave, rate = decode_ltx2_audio(mm, vae.audio, latent.audio)
    return Audio(wave.clamp(-1.0, 1.0), rate)


def preprocess_images(images: torch.Tensor, crf: int) -> torch.Tensor:
    """Each picture of an IMAGE batch re-compressed with H.264 at `crf` (0: unchanged), as LTX-2 was trained
    (diffusers' `apply_image_conditioning_crf`, which ComfyUI's LTXVPreprocess also does)."""
    import numpy as np
    from diffusers.pipelines.ltx2.utils import apply_image_conditioning_crf

    if crf <= 0:
        return images
    out = []
    for picture in images:
        pixels = (picture.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        squeezed = apply_image_conditioning_crf(np.ascontiguousarray(pixels), int(crf))
        out.append(torch.from_numpy(np.asarray(squeezed)).to(torch.float32) / 255.0)
    return torch.stack(out)


def image_in_place(
    mm: MemoryManager, vae: VaeRef, image: torch.Tensor, latent: Latents, strength: float
) -> Latents:
    """`latent` with its first frame replaced by the picture (resized to the latent's pixel size by diffusers'
    `VideoProcessor`, bilinear, as LTXV Image to Video) and kept by the sampler to `strength` (`keep_mask`)."""
    from diffusers.video_processor import VideoProcessor
    from PIL import Image

    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"field 'strength': between 0 and 1, got {strength}")
    if image.ndim != 4 or image.shape[-1] != 3:
        raise ValueError(
            f"input 'image': expected an IMAGE (batch, height, width, 3), got {tuple(image.shape)}"
        )
    if latent.samples.ndim != 5:
        raise ValueError(f"input 'latent': a video latent (1, C, F, h, w), got {tuple(latent.samples.shape)}")
    height, width = latent.pixel_size
    pixels = (image[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    processor = VideoProcessor(vae_scale_factor=vae.scale_factor, resample="bilinear")
    picture = processor.preprocess(Image.fromarray(pixels), height=height, width=width)  # (1, 3, H, W)
    first = encode_ltx2_image(mm, vae, picture.to(torch.float32))
    samples = latent.samples.clone()
    samples[:, :, :1] = first
    mask = torch.zeros(1, 1, *samples.shape[2:])
    mask[:, :, 0] = strength  # the share of the first frame the sampler keeps (1: all of it)
    return replace(latent, samples=samples, source="encoded", keep_mask=mask)
