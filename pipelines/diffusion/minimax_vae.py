"""MiniMax H3's latents in and out: the empty video + sound latent, keyframes encoded as anchors, and the
decode to frames (video VAE) and a stereo waveform (audio VAE).

Lives here: `register_minimax_audio`, `geometry_of`, `minimax_latent_shapes`, `empty_minimax_latent`, `still_request`,
`keyframe_minimax_latent`, `prepare_keyframe`, `image_to_video`, `decode_minimax`,
`decode_minimax_frames`, `decode_minimax_audio`, `minimax_vae_working`,
`minimax_audio_working`. May import: stdlib, numpy, torch, PIL, diffusers, memory, pipelines.video.value,
pipelines.diffusion.values / assembly / minimax_layout / minimax_text.

Mirrors the ends of diffusers' MiniMax H3 blocks: the video latents (1, C, F, h, w) are as the transformer sees
them (normalised by the VAE config's `latents_mean` / `latents_std`); decode denormalises, decodes, undoes the
ImageNet pixel normalisation and clamps to [0, 1] (`MiniMaxH3VideoDecodeStep`). The audio latents travel as
(2, C, L): the two stereo channels are two batch items of the mono audio VAE (`MiniMaxH3AudioDecodeStep`).
A still (an image latent under this model, ComfyUI's `image_minimax_h3_t2i`) is one latent frame with a
zero-length sound track (`still_request`, see `minimax_sampling`), decoded as ComfyUI decodes a single image.
A keyframe is resized onto the canvas (Lanczos stretch for the first, cover-crop for a last one:
`MiniMaxH3ResizeStep`), ImageNet-normalised, encoded, its posterior *sampled* under seed 42, rounded
through float16 and normalised (`encode_vae_condition`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch

from memory import MemoryManager, ModelHandle, Working
from pipelines.diffusion.assembly import read_json
from pipelines.diffusion.family_types import ClassRef
from pipelines.diffusion.minimax_layout import (
    KEYFRAME_ENCODE_SEED,
    MAX_FRAMES,
    MINIMAX_H3_AUDIO_CHANNELS,
    MINIMAX_H3_FPS,
    PIXEL_MEAN,
    PIXEL_STD,
    MiniMaxGeometry,
    align_num_frames,
    audio_latent_num_frames,
    minimax_geometry,
    video_latent_num_frames,
)
from pipelines.diffusion.values import (
    AudioDecoderRef,
    Conditioning,
    DenoiserRef,
    Latents,
    TextEncoderRef,
    VaeRef,
)
from pipelines.video.value import Audio, Video


def register_minimax_audio(
    mm: MemoryManager,
    root: Path,
    dtype: torch.dtype,
    register: Callable[..., ModelHandle],
    *,
    allow_pickle: bool,
) -> AudioDecoderRef:
    """The folder's `audio_vae` as a lazy `vae` component (`register`: the folder loader's own)."""
    vae = register(  # the class is imported when built: `app plan` registers it without diffusers
        mm,
        root,
        "audio_vae",
        ClassRef("diffusers", "AutoencoderKLMiniMaxH3Audio"),
        kind="vae",
        dtype=dtype,
        allow_pickle=allow_pickle,
    )
    config = read_json(root / "audio_vae" / "config.json")
    return AudioDecoderRef(vae=vae, vae_config=config, vocoder=None, vocoder_config={}, dtype=dtype)


# ComfyUI's split files (comfy_layouts.minimax_load): the video VAE file's value carries the audio VAE's config
# (the sound track's latent shape); the audio VAE file's value is an audio decoder only.
AUDIO_VAE_CONFIG_KEY = "_minimax_audio_vae_config"
AUDIO_ONLY_KEY = "_minimax_audio_only"


def _video_vae(vae: VaeRef) -> None:
    if vae.config.get(AUDIO_ONLY_KEY):
        raise ValueError(
            "input 'vae': this is MiniMax H3's audio VAE; wire the video VAE here (VAE Decode Audio takes this one)"
        )


def geometry_of(vae: VaeRef, denoiser: DenoiserRef | None) -> MiniMaxGeometry:
    _video_vae(vae)
    audio_config = vae.audio.vae_config if vae.audio is not None else vae.config.get(AUDIO_VAE_CONFIG_KEY)
    if audio_config is None:
        raise ValueError("input 'vae': this MiniMax H3 folder has no audio_vae (the model makes sound)")
    return minimax_geometry(vae.config, audio_config, denoiser.config if denoiser else None)


def minimax_latent_shapes(
    geometry: MiniMaxGeometry, width: int, height: int, frames: int
) -> tuple[tuple[int, int, int, int, int], tuple[int, int, int], int]:
    """((1, C, latent frames, h, w), (2, audio C, audio latents), frames): `frames` snapped up to the next
    count the VAE decodes (17n + 5 for the release), as the pipeline does; ValueError naming the field."""
    multiple = geometry.canvas_multiple
    if width % multiple or height % multiple:
        raise ValueError(
            f"fields 'width', 'height': must be multiples of {multiple} for MiniMax H3, got {width}x{height}"
        )
    if not 1 <= frames <= MAX_FRAMES:
        raise ValueError(
            f"field 'frames': MiniMax H3 takes 1 to {MAX_FRAMES} frames at {MINIMAX_H3_FPS} fps (as ComfyUI's "
            f"nodes; rounded up to {geometry.frames_per_chunk}n + {geometry.latents_per_chunk}), got {frames}"
        )
    aligned = align_num_frames(frames, geometry.frames_per_chunk, geometry.latents_per_chunk)
    latent_frames = video_latent_num_frames(aligned, geometry.frames_per_chunk, geometry.latents_per_chunk)
    s = geometry.spatial
    video = (1, geometry.latent_channels, latent_frames, height // s, width // s)
    audio = (MINIMAX_H3_AUDIO_CHANNELS, geometry.audio_channels, audio_latent_num_frames(aligned))
    return video, audio, aligned


def empty_minimax_latent(
    vae: VaeRef, denoiser: DenoiserRef | None, width: int, height: int, frames: int
) -> Latents:
    """Zeros shaped as the pipeline's video and audio latents (only the shapes matter: the sampler draws
    the noise)."""
    geometry = geometry_of(vae, denoiser)
    video, audio, _ = minimax_latent_shapes(geometry, width, height, frames)
    return Latents(
        samples=torch.zeros(video),
        vae_scale_factor=geometry.spatial,
        source="empty",
        audio=torch.zeros(audio),
        fps=float(MINIMAX_H3_FPS),
    )


def still_request(denoiser: DenoiserRef, latents: Latents) -> Latents:
    """An image latent (B, C, h, w) as the one-frame video with no sound H3 denoises for a still; any other
    latent unchanged. An empty one is first remade at this model's channels and pixels per latent, as
    ComfyUI's `fix_empty_latent_channels` remakes an Empty Latent Image's zeros (its 8 px grid resized
    nearest-exact: a side of 728 px is 91 latents there, round(91 x 8 / 16) = 46 at H3's 16, a 736 px picture).
    Its sides need not be whole 2x2 patches: the loops pad it as ComfyUI does (`minimax_sampling`)."""
    if latents.samples.ndim != 4 or latents.audio is not None:
        return latents
    samples = latents.samples
    channels, scale = int(denoiser.config.get("in_channels", samples.shape[1])), denoiser.vae_scale_factor
    if latents.source == "empty" and not samples.any():
        ratio = latents.vae_scale_factor / scale
        size = (round(samples.shape[-2] * ratio), round(samples.shape[-1] * ratio))
        samples = torch.zeros(samples.shape[0], channels, *size)
        latents = dataclasses.replace(latents, vae_scale_factor=scale)
    if samples.shape[1] != channels:
        raise ValueError(
            f"input 'latent': {denoiser.family.title} denoises {channels}-channel latents, this image latent "
            f"has {samples.shape[1]}"
        )
    audio_channels = int(denoiser.config.get("audio_in_channels", 32))
    return dataclasses.replace(
        latents,
        samples=samples.unsqueeze(2),  # (B, C, 1, h, w): one latent frame
        audio=torch.zeros(MINIMAX_H3_AUDIO_CHANNELS, audio_channels, 0),  # no sound rows
        fps=latents.fps or float(MINIMAX_H3_FPS),
    )


def prepare_keyframe(image: torch.Tensor, width: int, height: int, *, first: bool):  # -> PIL.Image.Image
    """An IMAGE batch's first picture onto the canvas, as `MiniMaxH3ResizeStep`: the first keyframe stretched
    (Lanczos), a follower cover-cropped (the released model's rounding and centring)."""
    from PIL import Image

    if image.ndim != 4 or image.shape[-1] != 3:
        raise ValueError(f"expected an IMAGE (batch, height, width, 3), got {tuple(image.shape)}")
    pixels = (image[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()  # the picture LoadImage read
    picture = Image.fromarray(pixels)
    if picture.size == (width, height):
        return picture
    if first:
        return picture.resize((width, height), Image.Resampling.LANCZOS)
    scale = max(width / picture.size[0], height / picture.size[1])
    size = (max(width, round(picture.size[0] * scale)), max(height, round(picture.size[1] * scale)))
    left, top = max(0, (size[0] - width) // 2), max(0, (size[1] - height) // 2)
    return picture.resize(size, Image.Resampling.LANCZOS).crop((left, top, left + width, top + height))


# Measured on the meta device (tests/test_family_minimax_working.py, at the release's VAE, 512x256 to
# 1344x768, 124 and 243 frames): the decode keeps about 6.5-6.9 values per output pixel of the whole video
# alive (the frames are assembled whole) plus one chunk's ViT activations, ~110 MiB at the decoder's 2048
# width; a keyframe encode runs the tiled spatial encoder, whose peak is one tile's, about 61M values at the
# release's 128 base channels whatever the picture's size.
_DECODE_PER_PIXEL = 7
_DECODE_CHUNK_VALUES_PER_WIDTH = 110 * 2**20 // 4 // 2048
_ENCODE_VALUES_PER_BASE_CHANNEL = 64_000_000 // 128
_FIXED = 16 * 2**20


def minimax_vae_working(
    ref: VaeRef, height: int, width: int, frames: int, *, encode: bool = False
) -> Working:
    """A decode's (or, `encode`, a keyframe encode's) live activations."""
    if encode:
        base = int(ref.config.get("block_out_channels", (128,))[0])
        elements = _ENCODE_VALUES_PER_BASE_CHANNEL * base
        return Working(elements * torch.finfo(ref.dtype).bits // 8 + _FIXED, f"encode 1x{height}x{width}")
    width_vit = int(ref.config.get("decoder_num_attention_heads", 32)) * int(
        ref.config.get("decoder_attention_head_dim", 64)
    )
    elements = _DECODE_PER_PIXEL * frames * height * width + _DECODE_CHUNK_VALUES_PER_WIDTH * width_vit
    return Working(elements * torch.finfo(ref.dtype).bits // 8 + _FIXED, f"1x{frames}x{height}x{width}")


# Measured on the meta device (tests/test_family_minimax_working.py, at the release's audio VAE, 207 and 600
# latents): its BigVGAN decoder keeps about 0.095 values per output sample per `decoder_dim` channel, plus a
# fixed ~66M values at the release's 1024 channels (the weight-normed kernels are rebuilt on every call).
_AUDIO_PER_SAMPLE_PER_DIM = 0.095
_AUDIO_FIXED_VALUES = 66_000_000


def minimax_audio_working(ref: AudioDecoderRef, latents: int) -> Working:
    """The audio VAE decode of both stereo channels' `latents` audio latents."""
    config = ref.vae_config
    hop = math.prod(int(rate) for rate in config.get("decoder_rates", (5, 5, 2, 2, 2, 2, 2)))
    dim = int(config.get("decoder_dim", 1024))
    samples = MINIMAX_H3_AUDIO_CHANNELS * latents * hop
    elements = int(_AUDIO_PER_SAMPLE_PER_DIM * dim * samples + _AUDIO_FIXED_VALUES * (dim / 1024) ** 2)
    return Working(elements * torch.finfo(ref.dtype).bits // 8 + _FIXED, f"2x{latents}")


@torch.no_grad()
def keyframe_minimax_latent(
    mm: MemoryManager,
    vae: VaeRef,
    denoiser: DenoiserRef | None,
    keyframes: list[tuple[str, object]],
    width: int,
    height: int,
    frames: int,
) -> Latents:
    """The empty latent plus each keyframe (anchor, PIL picture already on the canvas) encoded as
    `encode_vae_condition` does it."""
    empty = empty_minimax_latent(vae, denoiser, width, height, frames)
    import numpy as np

    encoded: list[tuple[str, torch.Tensor]] = []
    mean = torch.tensor(vae.config["latents_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config["latents_std"]).view(1, -1, 1, 1, 1)
    with mm.use(vae.handle, working=minimax_vae_working(vae, height, width, 1, encode=True)) as model:
        device = mm.device
        pixel_mean = torch.tensor(PIXEL_MEAN, device=device).view(1, -1, 1, 1, 1)
        pixel_std = torch.tensor(PIXEL_STD, device=device).view(1, -1, 1, 1, 1)
        for anchor, picture in keyframes:
            pixels = torch.from_numpy(np.array(picture)).to(device).permute(2, 0, 1)[None, :, None]
            pixels = (pixels.to(torch.float32).div(255.0) - pixel_mean) / pixel_std
            posterior = model.encode(pixels.to(vae.dtype), return_dict=False)[0]
            z = posterior.sample(generator=torch.Generator().manual_seed(KEYFRAME_ENCODE_SEED))
            z = z.to(torch.float16).float().cpu()  # the released recipe rounds through float16
            encoded.append((anchor, (z - mean) / std))
    return Latents(
        samples=empty.samples,
        vae_scale_factor=empty.vae_scale_factor,
        source="encoded",
        audio=empty.audio,
        fps=empty.fps,
        keyframes=tuple(encoded),
    )


@torch.no_grad()
def decode_minimax_frames(mm: MemoryManager, vae: VaeRef, latents: Latents) -> torch.Tensor:
    """Video latents -> frames (T, H, W, 3) float32 in [0, 1], CPU."""
    _video_vae(vae)
    samples = latents.samples
    if samples.ndim != 5 or samples.shape[0] != 1:
        raise ValueError(f"input 'latent': one video latent (1, C, frames, h, w), got {tuple(samples.shape)}")
    _, _, count, h, w = samples.shape
    if count == 1:
        return _decode_still(mm, vae, samples)
    s = vae.scale_factor
    clip_length = int(vae.config.get("clip_length", 17))
    out_frames = (count - 2) // 5 * clip_length + 5  # 5n + 2 -> 17n + 5
    # Two latent frames (5 pixel frames, the shortest ComfyUI makes) fill no decoder chunk once a chunk's dropped
    # tail is counted, and diffusers' decode returns nothing. ComfyUI pads one chunk of the last latent frame and
    # keeps the frames asked for (comfy/ldm/minimax/vae.py, `_decode_temporal_chunks`); so does this.
    ratio = math.prod(
        vae.config.get("temporal_downsample_factors", (1, 2, 2, 1, 1, 1))
    )  # pixel frames a latent
    chunk = -(-clip_length // ratio)  # latent frames a decoder chunk reads (the VAE's tokens_chunk_size)
    drop = int(vae.config.get("token_drop", 3))
    pad = chunk if drop and count + drop <= chunk else 0
    working = minimax_vae_working(vae, h * s, w * s, out_frames + pad * ratio)
    with mm.use(vae.handle, working=working) as model:
        device = mm.device
        mean = torch.tensor(vae.config["latents_mean"], device=device).view(1, -1, 1, 1, 1)
        std = torch.tensor(vae.config["latents_std"], device=device).view(1, -1, 1, 1, 1)
        x = samples.to(device=device, dtype=torch.float32) * std + mean
        if pad:
            x = torch.cat([x, x[:, :, -1:].repeat(1, 1, pad, 1, 1)], dim=2)
        video = model.decode(x.to(vae.dtype), return_dict=False)[0][:, :, :out_frames]
        pixel_mean = torch.tensor(PIXEL_MEAN, device=device).view(1, -1, 1, 1, 1)
        pixel_std = torch.tensor(PIXEL_STD, device=device).view(1, -1, 1, 1, 1)
        video = (video.float() * pixel_std + pixel_mean).clamp(0, 1)  # (1, 3, T, H, W)
    return video[0].permute(1, 2, 3, 0).to(dtype=torch.float32, device="cpu")


def _decode_still(mm: MemoryManager, vae: VaeRef, samples: torch.Tensor) -> torch.Tensor:
    """One latent frame -> one picture (1, H, W, 3), as ComfyUI's single-image decode (comfy/ldm/minimax/vae.py
    `decode`, PR #16881): the latent frame through the decoder alone, the last of the pixel frames it gives
    kept. Diffusers' `decode` has no such path (its chunking returns no frame for one latent frame); its
    `_decode_clip` is the one-chunk decode (spatially tiled where tiling is on), as its `_encode` runs a single
    frame through `_encode_clip`."""
    _, _, _, h, w = samples.shape
    s = vae.scale_factor
    ratio = math.prod(vae.config.get("temporal_downsample_factors", (1, 2, 2, 1, 1, 1)))
    with mm.use(vae.handle, working=minimax_vae_working(vae, h * s, w * s, ratio)) as model:
        device = mm.device
        mean = torch.tensor(vae.config["latents_mean"], device=device).view(1, -1, 1, 1, 1)
        std = torch.tensor(vae.config["latents_std"], device=device).view(1, -1, 1, 1, 1)
        x = samples.to(device=device, dtype=torch.float32) * std + mean
        picture = model._decode_clip(x.to(vae.dtype))[:, :, -1:]
        pixel_mean = torch.tensor(PIXEL_MEAN, device=device).view(1, -1, 1, 1, 1)
        pixel_std = torch.tensor(PIXEL_STD, device=device).view(1, -1, 1, 1, 1)
        picture = (picture.float() * pixel_std + pixel_mean).clamp(0, 1)  # (1, 3, 1, H, W)
    return picture[0].permute(1, 2, 3, 0).to(dtype=torch.float32, device="cpu")


@torch.no_grad()
def decode_minimax_audio(mm: MemoryManager, ref: AudioDecoderRef, audio: torch.Tensor) -> Audio:
    """Audio latents (2, C, L) -> the stereo sound track (the waveform clipped to [-1, 1], the VIDEO value's
    range; the decoder may overshoot it)."""
    if audio.ndim != 3 or audio.shape[0] != MINIMAX_H3_AUDIO_CHANNELS:
        raise ValueError(f"input 'latent': MiniMax H3 audio latents are (2, C, L), got {tuple(audio.shape)}")
    if audio.shape[-1] == 0:
        raise ValueError("input 'latent': this MiniMax H3 latent has no sound (a still): nothing to decode")
    with mm.use(ref.vae, working=minimax_audio_working(ref, audio.shape[-1])) as audio_vae:
        device = mm.device
        mean = torch.tensor(ref.vae_config["latents_mean"], device=device).view(1, -1, 1)
        std = torch.tensor(ref.vae_config["latents_std"], device=device).view(1, -1, 1)
        a = audio.to(device=device, dtype=torch.float32) * std + mean
        wave = audio_vae.decode(a.to(ref.dtype), return_dict=False)[0]  # (2, 1, samples)
    rate = int(ref.vae_config.get("sampling_rate", 32000))
    waveform = wave.float().permute(1, 0, 2)[0].cpu()  # (2, samples), the pipeline's (1, 2, samples)[0]
    return Audio(waveform.clamp(-1.0, 1.0), rate)


def decode_minimax(mm: MemoryManager, vae: VaeRef, latents: Latents, fps: float) -> Video:
    """Frames (T, H, W, 3) in [0, 1] and, when the latent carries one, the stereo sound track."""
    frames = decode_minimax_frames(mm, vae, latents)
    if latents.audio is None or latents.audio.shape[-1] == 0 or vae.audio is None:  # a still has no sound
        return Video(frames, fps)
    return Video(frames, fps, decode_minimax_audio(mm, vae.audio, latents.audio))


def image_to_video(
    mm: MemoryManager,
    text_encoder: TextEncoderRef,
    vae: VaeRef,
    denoiser: DenoiserRef | None,
    text: str,
    first: torch.Tensor | None,
    last: torch.Tensor | None,
    width: int,
    height: int,
    frames: int,
) -> tuple[Conditioning, Latents]:
    """MiniMax H3's fl2va request (or t2va without pictures): the prompt encoded with the keyframes shown to
    Qwen3-VL, and the latent carrying them as anchors ("first" before "last", the pipeline's packed order)."""
    from pipelines.diffusion.minimax_text import encode_minimax

    geometry = geometry_of(vae, denoiser)
    minimax_latent_shapes(geometry, width, height, frames)  # the fields' errors before any model runs
    given = [(anchor, image) for anchor, image in (("first", first), ("last", last)) if image is not None]
    pictures = []
    for index, (anchor, image) in enumerate(given):
        try:  # the first of the list is stretched onto the canvas, a follower cover-cropped (the pipeline's)
            pictures.append((anchor, prepare_keyframe(image, width, height, first=index == 0)))
        except ValueError as exc:
            raise ValueError(f"input '{anchor}_frame': {exc}") from None
    conditioning = encode_minimax(mm, text_encoder, text, tuple(p for _, p in pictures))
    if not pictures:
        return conditioning, empty_minimax_latent(vae, denoiser, width, height, frames)
    return conditioning, keyframe_minimax_latent(mm, vae, denoiser, pictures, width, height, frames)
