"""What the video nodes do for an LTX-2 model: the empty video + sound latent, and the decode to a VIDEO
with its sound track.

Lives here: `empty_ltx2_latent`, `image_ltx2_latent`, `decode_ltx2`, `DEFAULT_IMAGE_CRF`. May import: torch, memory, pipelines.video.value,
pipelines.diffusion.values / ltx2_vae / ltx2_sampling.

Kept out of nodes/ so the node types stay light to list; the nodes call these from their run functions.
"""

from __future__ import annotations

import torch

from memory import MemoryManager
from pipelines.diffusion.ltx2_vae import (
    DEFAULT_FPS,
    decode_ltx2_audio,
    decode_ltx2_video,
    encode_ltx2_image,
    ltx2_latent_shapes,
)
from pipelines.diffusion.values import DenoiserRef, Latents, VaeRef
from pipelines.video.value import Audio, Video

# LTX2Pipeline.check_inputs: "height and width have to be divisible by 32" (whatever the VAE's factor).
PIPELINE_MULTIPLE = 32


def empty_ltx2_latent(
    vae: VaeRef, denoiser: DenoiserRef | None, width: int, height: int, frames: int, fps: float = DEFAULT_FPS
) -> Latents:
    """Zeros shaped as the pipeline's video and audio latents for `frames` frames at `fps`."""
    multiple = max(
        PIPELINE_MULTIPLE, vae.scale_factor * int((denoiser.config if denoiser else {}).get("patch_size", 1))
    )
    if width % multiple or height % multiple:
        raise ValueError(
            f"fields 'width', 'height': must be multiples of {multiple} for LTX-2, got {width}x{height}"
        )
    video, audio = ltx2_latent_shapes(vae, width, height, frames, fps)
    if audio is None:
        raise ValueError("input 'vae': this LTX-2 folder has no audio_vae/vocoder (the model makes sound)")
    return Latents(
        samples=torch.zeros(video),
        vae_scale_factor=vae.scale_factor,
        source="empty",
        audio=torch.zeros(audio),
        fps=fps,
    )


# LTX2ImageToVideoPipeline's `image_crf` default for Gemma 3 folders (LTX-2.0 to 2.3): the first frame is
# re-compressed with H.264 at this CRF before encoding, the compression the model was trained against.
DEFAULT_IMAGE_CRF = 33


def image_ltx2_latent(
    mm: MemoryManager,
    vae: VaeRef,
    denoiser: DenoiserRef | None,
    image: torch.Tensor,
    width: int,
    height: int,
    frames: int,
    fps: float = DEFAULT_FPS,
    crf: int = DEFAULT_IMAGE_CRF,
) -> Latents:
    """The first frame conditioned on `image` (an IMAGE batch; its first picture), as
    `LTX2ImageToVideoPipeline`: re-compressed at `crf` (0: not), resized to `width` x `height` by diffusers'
    `VideoProcessor` (bilinear, as the pipeline's), encoded, repeated over the latent frames, with a conditioning mask of 1 on the first."""
    import numpy as np
    from diffusers.pipelines.ltx2.utils import apply_image_conditioning_crf
    from diffusers.video_processor import VideoProcessor
    from PIL import Image

    empty = empty_ltx2_latent(vae, denoiser, width, height, frames, fps)
    if image.ndim != 4 or image.shape[-1] != 3:
        raise ValueError(
            f"input 'image': expected an IMAGE (batch, height, width, 3), got {tuple(image.shape)}"
        )
    pixels = (image[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()  # the picture LoadImage read
    if crf:
        pixels = apply_image_conditioning_crf(np.ascontiguousarray(pixels), int(crf))
    processor = VideoProcessor(vae_scale_factor=vae.scale_factor, resample="bilinear")  # the I2V pipeline's
    picture = processor.preprocess(Image.fromarray(pixels), height=height, width=width)  # (1, 3, H, W)
    first = encode_ltx2_image(mm, vae, picture.to(torch.float32))
    count = empty.samples.shape[2]
    mask = torch.zeros(1, 1, *empty.samples.shape[2:])
    mask[:, :, 0] = 1.0
    return Latents(
        samples=first.repeat(1, 1, count, 1, 1),
        vae_scale_factor=vae.scale_factor,
        source="encoded",
        audio=empty.audio,
        fps=fps,
        keep_mask=mask,
    )


def decode_ltx2(mm: MemoryManager, vae: VaeRef, latents: Latents, fps: float) -> Video:
    """The frames at `fps`, and the sound track when the latent carries one (the waveform clipped to
    [-1, 1], the VIDEO value's range; the vocoder may overshoot it)."""
    frames = decode_ltx2_video(mm, vae, latents)
    if latents.audio is None or vae.audio is None:
        return Video(frames, fps)
    wave, rate = decode_ltx2_audio(mm, vae.audio, latents.audio)
    return Video(frames, fps, Audio(wave.clamp(-1.0, 1.0), rate))
