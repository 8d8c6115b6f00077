"""FLUX.2's latent layout: 2x2 patchify / unpatchify and the VAE's batch-norm normalisation.

Lives here: `patchify`, `unpatchify`, `is_batch_norm_vae`, `bn_normalize`, `bn_denormalize`. May import:
torch.

`AutoencoderKLFlux2` has no scaling factor: its latents are normalised by a BatchNorm's running statistics
in the 2x2-patchified space (4 x latent channels). A FLUX.2 LATENT keeps the VAE's own layout (B, C, H, W),
normalised: patchify -> arithmetic -> unpatchify, with the pipeline's operation order; the permutations are
exact, so the values equal the pipeline's patch-space ones bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch


def patchify(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, 4C, H/2, W/2), as `Flux2KleinPipeline._patchify_latents`."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


def unpatchify(latents: torch.Tensor) -> torch.Tensor:
    """(B, 4C, h, w) -> (B, C, 2h, 2w), as `Flux2KleinPipeline._unpatchify_latents`."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(b, c // 4, h * 2, w * 2)


def is_batch_norm_vae(config: dict[str, Any]) -> bool:
    """A VAE config normalised by batch-norm statistics (AutoencoderKLFlux2), not a scaling factor."""
    return "batch_norm_eps" in config


def _stats(vae: torch.nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    bn = vae.bn  # type: ignore[attr-defined]
    mean = bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(like.device, like.dtype)  # type: ignore[attr-defined]
    return mean, std


def bn_normalize(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """The VAE's raw latents -> a LATENT (as `Flux2KleinPipeline._encode_vae_image`)."""
    x = patchify(latents)
    mean, std = _stats(vae, x)
    return unpatchify((x - mean) / std)


def bn_denormalize(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """A LATENT -> what `vae.decode` takes (as the end of `Flux2KleinPipeline.__call__`)."""
    x = patchify(latents)
    mean, std = _stats(vae, x)
    return unpatchify(x * std + mean)
