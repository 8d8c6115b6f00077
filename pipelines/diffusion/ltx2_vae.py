"""LTX-2's latents in and out: the video VAE (5D latents <-> frames) and the audio VAE + vocoder (latent
spectrogram -> waveform), through the memory manager.

Lives here: `register_audio_decoder`, `ltx2_latent_shapes`, `decode_ltx2_video`, `decode_ltx2_audio`,
`audio_latent_frames`, `encode_ltx2_image`, `ltx2_vae_working`,
`audio_decoder_working`, `AUDIO_LATENT_DOWNSAMPLE`, `DEFAULT_FPS`. May import: stdlib, torch, diffusers, memory,
pipelines.diffusion.values / assembly.

Mirrors the end of `LTX2Pipeline.__call__`: the video latents (1, C, F, h, w) are as the transformer sees
them (normalised by the VAE's `latents_mean` / `latents_std` buffers and `scaling_factor`), so decode undoes
that in the pipeline's order and post-processes with diffusers' `VideoProcessor`; a VAE with
`timestep_conditioning` decodes at the pipeline's default `decode_timestep` 0 (its noise scale is then 0:
the latents are used as they are). The audio latents travel as (1, C, L, mel bins), normalised per packed
feature; decode packs them, denormalises, unpacks to (1, C, L, mel bins), decodes a mel spectrogram and the
vocoder makes the waveform at its `output_sampling_rate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch

from memory import MemoryManager, ModelHandle, Working
from pipelines.diffusion.assembly import read_json
from pipelines.diffusion.family_types import ClassRef
from pipelines.diffusion.values import AudioDecoderRef, Latents, VaeRef, ltx2_vae_ratios

# `AutoencoderKLLTX2Audio`'s LATENT_DOWNSAMPLE_FACTOR: 4x in time and in mel bins (not in its config).
AUDIO_LATENT_DOWNSAMPLE = 4
# LTX2Pipeline's `frame_rate` default (here, not in ltx2_sampling: the latent nodes read it while `app plan` runs)
DEFAULT_FPS = 24.0


def _vocoder_class(root: Path) -> ClassRef:
    """The vocoder class model_index.json names (`LTX2Vocoder`, or `LTX2VocoderWithBWE` for LTX-2.3), imported
    when built (`app plan` registers it without diffusers)."""
    library, name = read_json(root / "model_index.json").get("vocoder", ("ltx2", "LTX2Vocoder"))
    module = "diffusers.pipelines.ltx2" if library == "ltx2" else str(library)
    return ClassRef(module, str(name))


def register_audio_decoder(
    mm: MemoryManager,
    root: Path,
    dtype: torch.dtype,
    register: Callable[..., ModelHandle],
    *,
    allow_pickle: bool,
) -> AudioDecoderRef:
    """The folder's `audio_vae` and `vocoder` as two lazy `vae` components (`register`: the folder loader's
    own `_register_pretrained`)."""
    vae = register(  # the class is imported when built: `app plan` registers it without diffusers
        mm,
        root,
        "audio_vae",
        ClassRef("diffusers", "AutoencoderKLLTX2Audio"),
        kind="vae",
        dtype=dtype,
        allow_pickle=allow_pickle,
    )
    vocoder = register(
        mm, root, "vocoder", _vocoder_class(root), kind="vae", dtype=dtype, allow_pickle=allow_pickle
    )
    return AudioDecoderRef(
        vae=vae,
        vae_config=read_json(root / "audio_vae" / "config.json"),
        vocoder=vocoder,
        vocoder_config=read_json(root / "vocoder" / "config.json"),
        dtype=dtype,
    )


def audio_latent_frames(audio: AudioDecoderRef, frames: int, fps: float) -> int:
    """The pipeline's `audio_num_frames`: the video's duration in audio latents (sample rate / hop / 4)."""
    per_second = audio.vae_config.get("sample_rate", 16000) / audio.vae_config.get("mel_hop_length", 160)
    return round(frames / fps * per_second / float(AUDIO_LATENT_DOWNSAMPLE))


def ltx2_latent_shapes(
    vae: VaeRef, width: int, height: int, frames: int, fps: float
) -> tuple[tuple[int, int, int, int, int], tuple[int, int, int, int] | None]:
    """((1, C, latent frames, h, w), (1, C, audio latent frames, mel bins) or None without an audio
    decoder), or ValueError naming the field that does not fit the VAE."""
    spatial, temporal = ltx2_vae_ratios(vae.config)
    if (frames - 1) % temporal:
        raise ValueError(
            f"field 'frames': this VAE makes 1 + {temporal}k frames (1, {1 + temporal}, {1 + 2 * temporal}, ...), "
            f"got {frames}"
        )
    channels = int(vae.config.get("latent_channels", 128))
    video = (1, channels, (frames - 1) // temporal + 1, height // spatial, width // spatial)
    if vae.audio is None:
        return video, None
    config = vae.audio.vae_config
    mel = int(config.get("mel_bins", 64)) // AUDIO_LATENT_DOWNSAMPLE
    audio = (1, int(config.get("latent_channels", 8)), audio_latent_frames(vae.audio, frames, fps), mel)
    return video, audio


# Fitted on the meta device (tests/test_family_ltx2_working.py): LTX-2's decoder runs all frames at once; its peak is
# about 2.7 values per output pixel (frames x H x W) for every channel of its widest-resolution stage
# (`decoder_block_out_channels[0]`) per patch pixel (`patch_size`^2), plus the (3, frames, H, W) output:
# 1.09-1.10x of the live tensors for LTX-2.0's VAE at 768x512 and 1280x704, 49-121 frames; LTX-2.3's
# decoder keeps less (1.28x).
_PER_PIXEL_PER_CHANNEL = 2.75


def ltx2_vae_working(ref: VaeRef, latents: Latents) -> Working:
    """The decode's (or a one-frame encode's) live activations, from the output size."""
    _, _, frames, h, w = latents.samples.shape
    spatial, temporal = ltx2_vae_ratios(ref.config)
    height, width = h * spatial, w * spatial
    out_frames = (frames - 1) * temporal + 1
    channels = int(ref.config.get("decoder_block_out_channels", (256,))[0])
    patch = int(ref.config.get("patch_size", 4))
    per_pixel = _PER_PIXEL_PER_CHANNEL * channels / patch**2 + 3
    elements = int(per_pixel * out_frames * height * width)
    return Working(elements * torch.finfo(ref.dtype).bits // 8, f"1x{frames}x{height}x{width}")


def _buffers(vae: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = vae.latents_mean.view(1, -1, 1, 1, 1).to(x.device, x.dtype)
    std = vae.latents_std.view(1, -1, 1, 1, 1).to(x.device, x.dtype)
    return mean, std


@torch.no_grad()
def decode_ltx2_video(mm: MemoryManager, ref: VaeRef, latents: Latents) -> torch.Tensor:
    """Video latents -> frames (T, H, W, 3) float32 in [0, 1], CPU."""
    from diffusers.video_processor import VideoProcessor

    samples = latents.samples
    if samples.ndim != 5 or samples.shape[0] != 1:
        raise ValueError(f"input 'latent': one video latent (1, C, frames, h, w), got {tuple(samples.shape)}")
    scaling = float(ref.config.get("scaling_factor", 1.0))
    with mm.use(ref.handle, working=ltx2_vae_working(ref, latents)) as vae:
        x = samples.to(device=mm.device, dtype=ref.dtype)
        mean, std = _buffers(vae, x)
        x = x * std / scaling + mean  # the pipeline's _denormalize_latents
        timestep = None
        if ref.config.get("timestep_conditioning"):  # decode_timestep 0, decode_noise_scale 0: x unchanged
            timestep = torch.zeros(1, device=x.device, dtype=x.dtype)
        video = vae.decode(x, timestep, return_dict=False)[0]  # (1, 3, T, H, W) in [-1, 1]
    processor = VideoProcessor(vae_scale_factor=ref.scale_factor)
    frames = processor.postprocess_video(video, output_type="pt")[0]  # (T, 3, H, W) in [0, 1]
    return frames.permute(0, 2, 3, 1).to(dtype=torch.float32, device="cpu")


# Fitted on the meta device (tests/test_family_ltx2_working.py) at LTX-2.0's audio VAE and vocoder, 2 to 10 s
# of sound: the audio VAE keeps about 7.1 values per mel frame x mel bin x base channel, the vocoder about
# 0.313 per output sample x hidden channel (its first, widest stage is the longest-lived). Mel frames are 4 per
# audio latent frame; output samples are the mel frames x the vocoder's upsampling factors.
_AUDIO_VAE_PER_VALUE = 7.2
_VOCODER_PER_SAMPLE_PER_HIDDEN = 0.32


def audio_decoder_working(ref: AudioDecoderRef, audio_frames: int) -> tuple[Working, Working]:
    """(audio VAE decode, vocoder) working memory for `audio_frames` audio latent frames."""
    mel_frames = AUDIO_LATENT_DOWNSAMPLE * audio_frames
    config, vocoder = ref.vae_config, ref.vocoder_config
    bits = torch.finfo(ref.dtype).bits
    vae = (
        _AUDIO_VAE_PER_VALUE
        * int(config.get("base_channels", 128))
        * int(config.get("mel_bins", 64))
        * mel_frames
    )
    samples = mel_frames * math.prod(int(f) for f in vocoder.get("upsample_factors", (6, 5, 2, 2, 2)))
    voc = _VOCODER_PER_SAMPLE_PER_HIDDEN * int(vocoder.get("hidden_channels", 1024)) * samples
    key = f"1x{audio_frames}"
    return Working(int(vae) * bits // 8, key), Working(int(voc) * bits // 8, key)


@torch.no_grad()
def decode_ltx2_audio(
    mm: MemoryManager, ref: AudioDecoderRef, audio: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """Audio latents (1, C, L, mel) -> (waveform (channels, samples) float32 CPU, sample rate)."""
    mel_bins = audio.shape[3]
    vae_working, vocoder_working = audio_decoder_working(ref, audio.shape[2])
    with mm.use(ref.vae, working=vae_working) as audio_vae:
        x = (
            audio.to(device=mm.device, dtype=torch.float32).transpose(1, 2).flatten(2, 3)
        )  # packed (1, L, C x mel)
        mean = audio_vae.latents_mean.to(x.device, x.dtype)
        std = audio_vae.latents_std.to(x.device, x.dtype)
        x = x * std + mean  # the pipeline's _denormalize_audio_latents, on the packed latents
        x = x.unflatten(2, (-1, mel_bins)).transpose(1, 2)  # (1, C, L, mel): _unpack_audio_latents
        mel = audio_vae.decode(x.to(ref.dtype), return_dict=False)[0]
    with mm.use(ref.vocoder, working=vocoder_working) as vocoder:
        wave = vocoder(mel.to(mm.device))  # (1, channels, samples)
    rate = int(ref.vocoder_config.get("output_sampling_rate", 24000))
    return wave[0].to(dtype=torch.float32, device="cpu"), rate


@torch.no_grad()
def encode_ltx2_image(mm: MemoryManager, ref: VaeRef, image: torch.Tensor) -> torch.Tensor:
    """A (1, 3, H, W) picture in [-1, 1] -> its one-frame latent (1, C, 1, h, w), normalised as
    `LTX2ImageToVideoPipeline.prepare_latents` does it: the distribution's mode, then the VAE's mean and
    std with a scaling factor of 1 (the pipeline leaves the config's out here, unlike in decode)."""
    _, _, height, width = image.shape
    spatial, _ = ltx2_vae_ratios(ref.config)
    latents = Latents(torch.zeros(1, 1, 1, height // spatial, width // spatial), spatial)
    with mm.use(ref.handle, working=ltx2_vae_working(ref, latents)) as vae:
        x = image.to(device=mm.device, dtype=ref.dtype).unsqueeze(2)  # (1, 3, 1, H, W)
        z = vae.encode(x).latent_dist.mode().to(torch.float32)
        mean, std = _buffers(vae, z)
        return ((z - mean) * 1.0 / std).cpu()
