"""Working-memory formulas: the KV cache of a decoder LLM and diffusion activations.

May import: stdlib, torch.
Every number here is a product of shapes and element sizes; the terms are named in each docstring. They are
the fallback: once a node has run, the measured peak (memory.learned) replaces them.
"""

from __future__ import annotations

import torch


def element_size(dtype: torch.dtype) -> int:
    return dtype.itemsize


def kv_cache_bytes(
    layers: int,
    batch: int,
    seq_len: int,
    kv_heads: int,
    head_dim: int,
    dtype: torch.dtype | int = torch.float32,
) -> int:
    """Bytes of a full KV cache: 2 (key and value) x layers x batch x seq_len x kv_heads x head_dim x bytes.

    `seq_len` is the number of cached positions. After `generate(...)` that is prompt + new tokens - 1: the
    last sampled token is returned but never fed back, so it has no key/value yet.
    """
    nbytes = dtype if isinstance(dtype, int) else element_size(dtype)
    return 2 * layers * batch * seq_len * kv_heads * head_dim * nbytes


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
    """Activation bytes for one call of a diffusion component at `height` x `width` pixels.

    kind "denoiser" (UNet / DiT): latents are (H/vae_scale) x (W/vae_scale) tokens t0; batch b doubles under
      classifier-free guidance. Two terms:
      - skip connections the UNet keeps for its up path: sum over levels i of
        (layers_per_block + 1) x C_i x t0 / 4^i  (one per resnet/attention layer plus the downsampler);
      - the widest transformer block's transient tensors at level 0: q, k, v, attention out (4 x C_0) and the
        GEGLU feed-forward (inner = 4 x C_0, doubled by the gate: 8 x C_0), i.e. 12 x C_0 x t0.
      Attention scores are not counted: PyTorch SDPA (flash / memory-efficient / CPU flash) never
      materialises the t0 x t0 matrix.
    kind "vae_decode" / "vae_encode": the full-resolution stage of the VAE holds the upsampled input
      (C_1 channels) plus GroupNorm, SiLU and conv outputs at C_0: (C_1 + 3 x C_0) x H x W. Pass the VAE's
      block_out_channels (SD: 128, 256, 512, 512).
    kind "text_encoder": per token the residual, q, k, v, out (5 x hidden) and the 4x MLP: 9 x hidden x tokens.
    Everything is multiplied by batch and the element size of `dtype`.
    """
    esize = element_size(dtype)
    if kind == "denoiser":
        b = batch * (2 if guidance else 1)
        t0 = (height // vae_scale) * (width // vae_scale)
        skips = sum((layers_per_block + 1) * c * t0 // (4**i) for i, c in enumerate(block_out_channels))
        transient = 12 * block_out_channels[0] * t0
        return b * esize * (skips + transient)
    if kind in ("vae_decode", "vae_encode"):
        c0 = block_out_channels[0]
        c1 = block_out_channels[1] if len(block_out_channels) > 1 else c0
        return batch * esize * (c1 + 3 * c0) * height * width
    if kind == "text_encoder":
        b = batch * (2 if guidance else 1)
        return b * esize * 9 * hidden_size * text_tokens
    raise ValueError(f"no working-memory formula for kind {kind!r}")
