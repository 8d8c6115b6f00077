"""Video VAE decode (5D latents -> frames), through the memory manager: the Wan VAE.

Lives here: `decode_video`, `video_latent_shape`, `video_vae_working`, `check_video_latents`,
`unscale_video_latents`. May import: torch, diffusers, memory,
pipelines.diffusion.values.

The latents are (1, C, latent frames, h, w), already scaled as the denoiser sees them; decode undoes the
per-channel `latents_mean` / `latents_std` in `WanPipeline.__call__`'s exact operation order (a division by
1 / std) and post-processes with diffusers' `VideoProcessor`. Frames come out float32 (T, H, W, 3) in [0, 1] on
the CPU: the VIDEO value's layout (pipelines/video/value.py). Pixel frames per latent frame are the VAE
config's `scale_factor_temporal` (the first latent frame is one picture frame, each next one that many).
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.values import Latents, VaeRef


def video_latent_shape(
    vae_config: dict, width: int, height: int, frames: int
) -> tuple[int, int, int, int, int]:
    """(1, C, latent frames, h, w) for a video of `frames` frames at `width` x `height`, or ValueError naming
    the field that does not fit the VAE's scale factors."""
    spatial = int(vae_config.get("scale_factor_spatial", 8))
    temporal = int(vae_config.get("scale_factor_temporal", 4))
    channels = int(vae_config.get("z_dim", 16))
    if (frames - 1) % temporal:
        raise ValueError(
            f"field 'frames': this VAE makes 1 + {temporal}k frames (1, {1 + temporal}, {1 + 2 * temporal}, ...), "
            f"got {frames}"
        )
    return 1, channels, (frames - 1) // temporal + 1, height // spatial, width // spatial


# Fitted on the meta device (tests/test_family_wan.py): Wan 2.1's VAE decodes one latent frame at a time with
# a causal cache, so its peak does not grow with the frames beyond the output video itself: about 50.7 values
# per output pixel per base channel (480x480 to 1280x720, 9 to 81 frames).
_PER_PIXEL_PER_BASE = 52


def video_vae_working(ref: VaeRef, latents: Latents) -> Working:
    """The decoder's live activations at the full-resolution stage plus the (3, frames, H, W) output."""
    _, _, frames, h, w = latents.samples.shape
    scale = latents.vae_scale_factor
    height, width = h * scale, w * scale
    out_frames = (frames - 1) * int(ref.config.get("scale_factor_temporal", 4)) + 1
    base = int(ref.config.get("decoder_base_dim") or ref.config.get("base_dim", 96))
    elements = _PER_PIXEL_PER_BASE * base * height * width + 3 * out_frames * height * width
    formula = elements * torch.finfo(ref.dtype).bits // 8
    return Working(formula, f"1x{frames}x{height}x{width}")


def check_video_latents(latents: Latents) -> None:
    samples = latents.samples
    if samples.ndim != 5:
        raise ValueError(
            f"input 'latent': a video VAE decodes video latents (batch, channels, frames, h, w), got {samples.ndim}D"
        )
    if samples.shape[0] != 1:
        raise ValueError(f"input 'latent': one video at a time, got a batch of {samples.shape[0]}")


def unscale_video_latents(ref: VaeRef, x: torch.Tensor) -> torch.Tensor:
    """The denoiser's latents -> the VAE's, in `WanPipeline.__call__`'s exact operation order."""
    config = ref.config
    z_dim = x.shape[1]
    mean = torch.tensor(config["latents_mean"]).view(1, z_dim, 1, 1, 1).to(x.device, x.dtype)
    inv_std = 1.0 / torch.tensor(config["latents_std"]).view(1, z_dim, 1, 1, 1).to(x.device, x.dtype)
    return x / inv_std + mean


@torch.no_grad()
def decode_video(mm: MemoryManager, ref: VaeRef, latents: Latents) -> torch.Tensor:
    """Video latents -> frames (T, H, W, 3) float32 in [0, 1], CPU."""
    from diffusers.video_processor import VideoProcessor

    check_video_latents(latents)
    with mm.use(ref.handle, working=video_vae_working(ref, latents)) as vae:
        x = latents.samples.to(device=mm.device, dtype=ref.dtype)
        video = vae.decode(unscale_video_latents(ref, x), return_dict=False)[0]  # (1, 3, T, H, W) in [-1, 1]
    processor = VideoProcessor(vae_scale_factor=ref.scale_factor)
    frames = processor.postprocess_video(video, output_type="pt")[0]  # (T, 3, H, W) in [0, 1]
    return frames.permute(0, 2, 3, 1).to(dtype=torch.float32, device="cpu")
