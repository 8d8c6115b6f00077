"""Working memory of the diffusion components, declared as facts: which activations are alive at once.

Lives here: `unet_activations`, `dit_activations`, `vae_activations`, `text_encoder_activations`,
`diffusion_working_bytes`. May import: stdlib, torch, memory.estimates.

The model knowledge (skip connections, GEGLU, GroupNorm, the CLIP MLP) lives here, next to the pipelines
that run those models; memory/ only multiplies and adds (`memory.estimates.activation_bytes`). Each figure is
the fallback: once a node has run, the measured peak (memory.learned) replaces it. Attention scores are never
counted: PyTorch SDPA (flash / memory-efficient / CPU flash) does not materialise the tokens x tokens matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from memory.estimates import Activations, activation_bytes


def unet_activations(
    block_out_channels: Sequence[int], layers_per_block: int, latent_tokens: int
) -> list[Activations]:
    """A UNet call at `latent_tokens` = (H / vae_scale) x (W / vae_scale) positions.

    - Skip connections kept for the up path: per level i, one per resnet/attention layer plus the
      downsampler ((layers_per_block + 1) tensors of C_i channels) at a quarter of the positions per level.
    - The widest transformer block's transients at level 0: q, k, v and the attention output (4 x C_0) and
      the GEGLU feed-forward (inner = 4 x C_0, doubled by the gate: 8 x C_0).
    """
    skips = [
        Activations(f"skip connections, level {i}", layers_per_block + 1, c, latent_tokens // 4**i)
        for i, c in enumerate(block_out_channels)
    ]
    c0 = block_out_channels[0]
    return [
        *skips,
        Activations("q, k, v, attention out", 4, c0, latent_tokens),
        Activations("GEGLU feed-forward (4x, gated)", 8, c0, latent_tokens),
    ]


def dit_activations(hidden: int, latent_tokens: int) -> list[Activations]:
    """A DiT (PixArt, SD3, Flux) call: one level of its hidden width, counted like a UNet's level 0 with two
    layers of residuals (3 x hidden) plus q, k, v, out and the gated feed-forward (12 x hidden)."""
    return unet_activations((hidden,), 2, latent_tokens)


def vae_activations(block_out_channels: Sequence[int], height: int, width: int) -> list[Activations]:
    """The VAE's full-resolution stage (decode or encode): the upsampled input at C_1 channels plus GroupNorm,
    SiLU and conv outputs at C_0, over height x width pixels."""
    c0 = block_out_channels[0]
    c1 = block_out_channels[1] if len(block_out_channels) > 1 else c0
    return [
        Activations("upsampled input", 1, c1, height * width),
        Activations("GroupNorm, SiLU, conv out", 3, c0, height * width),
    ]


def text_encoder_activations(hidden_size: int, tokens: int) -> list[Activations]:
    """A CLIP/T5 encoder layer per token: the residual, q, k, v, out (5 x hidden) and the 4x MLP."""
    return [
        Activations("residual, q, k, v, out", 5, hidden_size, tokens),
        Activations("MLP (4x)", 4, hidden_size, tokens),
    ]


def diffusion_working_bytes(
    kind: str,
    *,
    height: int,
    width: int,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
    block_out_channels: tuple[int, ...] = (320, 640, 1280, 1280),
    layers_per_block: int = 2,
    vae_scale: int = 8,
    guidance: bool = True,
    text_tokens: int = 77,
    hidden_size: int = 768,
) -> int:
    """Activation bytes of one call of a diffusion component at `height` x `width` pixels.

    kind: "denoiser" (UNet facts; batch doubled under classifier-free guidance), "vae_decode" / "vae_encode"
    (pass the VAE's block_out_channels, SD: 128, 256, 512, 512) or "text_encoder".
    """
    if kind == "denoiser":
        tokens = (height // vae_scale) * (width // vae_scale)
        terms = unet_activations(block_out_channels, layers_per_block, tokens)
        return activation_bytes(terms, batch=batch * (2 if guidance else 1), dtype=dtype)
    if kind in ("vae_decode", "vae_encode"):
        return activation_bytes(vae_activations(block_out_channels, height, width), batch=batch, dtype=dtype)
    if kind == "text_encoder":
        terms = text_encoder_activations(hidden_size, text_tokens)
        return activation_bytes(terms, batch=batch * (2 if guidance else 1), dtype=dtype)
    raise ValueError(f"no working-memory formula for kind {kind!r}")
