"""VAE decode (latents -> IMAGE) and encode (IMAGE -> latents), through the memory manager.

Lives here: `decode`, `encode`, `vae_working_bytes`. May import: torch, diffusers, memory, pipelines.diffusion.values / flux2_latents / working / vae_lean.

IMAGE values follow the ComfyUI convention: float32 (B, H, W, C) in [0, 1] on the CPU. Latents are scaled
(what the denoiser sees): decode undoes the scaling exactly as the diffusers pipelines do before
`vae.decode`, including SDXL-style `latents_mean`/`latents_std`, SD3/Flux-style `shift_factor`,
Qwen-Image's mean/std without a scaling factor (its 3D VAE sees a picture as one frame) and FLUX.2's
batch-norm statistics (`flux2_latents`).
Pixel pre/post-processing is diffusers' `VaeImageProcessor`.
"""

from __future__ import annotations

import torch

from memory import MemoryManager, Working
from pipelines.diffusion.flux2_latents import bn_denormalize, bn_normalize, is_batch_norm_vae
from pipelines.diffusion.vae_lean import lean_decoder
from pipelines.diffusion.values import Latents, VaeRef
from pipelines.diffusion.working import diffusion_working_bytes


def vae_working_bytes(ref: VaeRef, height: int, width: int, batch: int, kind: str) -> int:
    return diffusion_working_bytes(
        kind,
        height=height,
        width=width,
        batch=batch,
        dtype=ref.dtype,
        block_out_channels=tuple(ref.config.get("block_out_channels", (128, 256))),
    )


def vae_working(ref: VaeRef, height: int, width: int, batch: int, kind: str) -> Working:
    return Working(vae_working_bytes(ref, height, width, batch, kind), f"{batch}x{height}x{width}")


def _mean_std(ref: VaeRef, latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """SDXL-style per-channel `latents_mean` / `latents_std` as (1, C, 1, 1) tensors, if the VAE has them."""
    config = ref.config
    if config.get("latents_mean") is None or config.get("latents_std") is None:
        return None
    shape = (1, latents.shape[1], 1, 1)
    mean = torch.tensor(config["latents_mean"]).view(shape).to(latents.device, latents.dtype)
    std = torch.tensor(config["latents_std"]).view(shape).to(latents.device, latents.dtype)
    return mean, std


def _frames(ref: VaeRef) -> bool:
    """A 3D (video-style) VAE that takes (B, C, frames, H, W): Qwen-Image's, whose config has
    `temperal_downsample`."""
    return "temperal_downsample" in ref.config


def _qwen21(ref: VaeRef) -> bool:
    """Qwen-Image 2.1's VAE, whose pipeline multiplies by the std (Qwen-Image's divides by its inverse)."""
    return ref.family.vae_ref.name == "AutoencoderKLQwenImage21"


# _unscale and _scale keep diffusers' exact operation order, so decode/encode stay bit-identical to it.
def _unscale(ref: VaeRef, latents: torch.Tensor, vae: torch.nn.Module) -> torch.Tensor:
    if is_batch_norm_vae(ref.config):  # FLUX.2: the VAE's batch-norm statistics, not a scaling factor
        return bn_denormalize(vae, latents)
    scaling = ref.config.get("scaling_factor", 0.18215)
    stats = _mean_std(ref, latents)
    if stats is not None and _qwen21(ref):  # QwenImage21Pipeline's own order
        mean, std = stats
        return latents * std + mean
    if stats is not None and "scaling_factor" not in ref.config:  # Qwen-Image's VAE: no scaling factor
        mean, std = stats
        return latents / (1.0 / std) + mean
    if stats is not None:
        mean, std = stats
        return latents * std / scaling + mean
    if ref.config.get("shift_factor") is not None:
        return latents / scaling + ref.config["shift_factor"]
    return latents / scaling


def _scale(ref: VaeRef, latents: torch.Tensor, vae: torch.nn.Module) -> torch.Tensor:
    if is_batch_norm_vae(ref.config):
        return bn_normalize(vae, latents)
    scaling = ref.config.get("scaling_factor", 0.18215)
    stats = _mean_std(ref, latents)
    if stats is not None and _qwen21(ref):  # QwenImage21Pipeline._encode_vae_image's order
        mean, std = stats
        return (latents - mean) / std
    if stats is not None and "scaling_factor" not in ref.config:  # Qwen-Image's VAE: no scaling factor
        mean, std = stats
        return (latents - mean) * (1.0 / std)
    if stats is not None:
        mean, std = stats
        return (latents - mean) * scaling / std
    if ref.config.get("shift_factor") is not None:
        return (latents - ref.config["shift_factor"]) * scaling
    return latents * scaling


@torch.no_grad()
def decode(mm: MemoryManager, ref: VaeRef, latents: Latents) -> torch.Tensor:
    """Latents -> IMAGE (B, H, W, C) float32 in [0, 1], CPU."""
    samples = latents.samples.to(device=mm.device, dtype=ref.dtype)
    height, width = latents.pixel_size
    working = vae_working(ref, height, width, samples.shape[0], "vae_decode")
    with mm.use(ref.handle, working=working) as vae:
        if _frames(ref):  # a picture is one frame: (B, C, 1, h, w) in, (B, 3, 1, H, W) out
            image = vae.decode(_unscale(ref, samples, vae).unsqueeze(2), return_dict=False)[0][:, :, 0]
        else:
            with lean_decoder(vae):  # the same picture, fewer full-size activations at once
                image = vae.decode(_unscale(ref, samples, vae), return_dict=False)[0]
    from diffusers.image_processor import (
        VaeImageProcessor,
    )  # here: `app plan` imports this module, not diffusers

    processor = VaeImageProcessor(vae_scale_factor=ref.scale_factor)
    image = processor.postprocess(image, output_type="pt")  # (B, C, H, W) in [0, 1]
    return image.permute(0, 2, 3, 1).to(dtype=torch.float32, device="cpu")


def _preprocessed_size(ref: VaeRef, image: torch.Tensor) -> tuple[int, int]:
    """(H, W) of IMAGE (B, H, W, C) after `VaeImageProcessor.preprocess`: a tensor with the latent channel count
    passes through, a picture is cut down to multiples of the scale (`get_default_height_width`)."""
    height, width = int(image.shape[1]), int(image.shape[2])
    if image.shape[-1] == ref.latent_channels:
        return height, width
    return height - height % ref.scale_factor, width - width % ref.scale_factor


@torch.no_grad()
def encode(mm: MemoryManager, ref: VaeRef, image: torch.Tensor) -> Latents:
    """IMAGE (B, H, W, C) in [0, 1] -> scaled latents (the distribution's mode: deterministic)."""
    if int(ref.config.get("in_channels", 3)) == 4 and image.shape[-1] == 3:
        # Qwen-Image 2.1's VAE reads RGBA: an RGB picture is opaque (as the pipeline's `convert("RGBA")`)
        image = torch.cat([image, torch.ones_like(image[..., :1])], dim=-1)
    height, width = _preprocessed_size(ref, image)
    working = vae_working(ref, height, width, image.shape[0], "vae_encode")
    with mm.use(ref.handle, working=working) as vae:
        # Preprocessed inside the use: `app plan` stops at the use, before diffusers' seconds of imports.
        from diffusers.image_processor import VaeImageProcessor

        # The latent channel count as the pipelines set it: preprocess passes a tensor with that many channels
        # through untouched (as latents), which an RGBA picture for a 4-channel latent would be taken for.
        processor = VaeImageProcessor(
            vae_scale_factor=ref.scale_factor, vae_latent_channels=ref.latent_channels
        )
        pixels = processor.preprocess(
            image.permute(0, 3, 1, 2)
        )  # (B, C, H, W) in [-1, 1], sides multiple of scale
        pixels = pixels.to(device=mm.device, dtype=ref.dtype)
        if _frames(ref):
            latents = vae.encode(pixels.unsqueeze(2)).latent_dist.mode()[:, :, 0]
        else:
            latents = vae.encode(pixels).latent_dist.mode()
    return Latents(
        samples=_scale(ref, latents, vae).cpu(), vae_scale_factor=ref.scale_factor, source="encoded"
    )
