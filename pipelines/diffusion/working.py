"""Working memory of the diffusion components, declared as facts: which activations are alive at once.

Lives here: `unet_activations`, `dit_activations`, `vae_activations`, `text_encoder_activations`,
`chat_encoder_activations`, `chat_encoder_working_bytes`, `QWEN3_4B`, `diffusion_working_bytes`. May import: stdlib, torch, memory.estimates,
pipelines.diffusion.vae_lean (when the lean decode's resnets run, its band size).

The model knowledge (skip connections, GEGLU, GroupNorm, the CLIP MLP) lives here, next to the pipelines
that run those models; memory/ only multiplies and adds (`memory.estimates.activation_bytes`). Each figure is
the fallback: once a node has run, the measured peak (memory.learned) replaces it. Attention scores are never
counted: PyTorch SDPA (flash / memory-efficient / CPU flash) does not materialise the tokens x tokens matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.vae_lean import BAND_BYTES as VAE_BAND_BYTES
from pipelines.diffusion.vae_lean import lean_resnets_run


def unet_activations(
    block_out_channels: Sequence[int],
    layers_per_block: int,
    latent_tokens: int,
    attention_level: int = 0,
) -> list[Activations]:
    """A UNet call at `latent_tokens` = (H / vae_scale) x (W / vae_scale) positions.

    The peak is the feed-forward of the widest-resolution transformer block on the way up
    (`attention_level`: 0 for SD 1.x/2.x, 1 for SDXL, whose first level has no attention):
    - skip connections kept for the up path: per level i, one per resnet/attention layer plus the
      downsampler ((layers_per_block + 1) tensors of C_i channels) at a quarter of the positions per level;
    - that block's residual stream: input, residual, normed input, attention output and their sum (5 x C);
    - its GEGLU feed-forward: the projection to 2 x 4C, the GELU of the gate (4C) and the gated product
      (4C), alive together (16 x C).
    Measured on SD 1.5 and SDXL (tests/test_working_memory.py): within a few percent of the live tensors.
    """
    skips = [
        Activations(f"skip connections, level {i}", layers_per_block + 1, c, latent_tokens // 4**i)
        for i, c in enumerate(block_out_channels)
    ]
    level = min(attention_level, len(block_out_channels) - 1)
    c, tokens = block_out_channels[level], latent_tokens // 4**level
    return [
        *skips,
        Activations(f"residual stream, level {level}", 5, c, tokens),
        Activations(f"GEGLU feed-forward, level {level}", 16, c, tokens),
    ]


def dit_activations(hidden: int, tokens: int) -> list[Activations]:
    """A DiT (PixArt, SD3, Flux) call over `tokens` = image patches plus, under joint attention (SD3,
    Flux), the text tokens that travel with them:
    - the residual stream, norms and attention output (5 x hidden);
    - the feed-forward's 4x projection and its GELU (8 x hidden);
    - Flux's single-stream blocks concatenate the attention and MLP outputs (5x) before projecting back:
      3 x hidden beyond the above.
    """
    return [
        Activations("residual stream, norms, attention out", 5, hidden, tokens),
        Activations("feed-forward: 4x projection and its GELU", 8, hidden, tokens),
        Activations("single-stream blocks: attention and MLP outputs concatenated", 3, hidden, tokens),
    ]


def vae_activations(
    block_out_channels: Sequence[int], height: int, width: int, *, decode: bool = True, lean: bool = False
) -> list[Activations]:
    """The VAE's full-resolution stage over height x width pixels.

    Decode: the last up block's first resnet takes the upsampled C_1 channels; its input, GroupNorm and
    SiLU outputs are alive together (3 x C_1): the plain decode, and the lean one (`vae_lean`) where it
    keeps its plain resnets (not float32, or the input within `BAND_BYTES`); measured at 3 x C_1 on the
    SD-shaped VAE at 256x256 (195 MiB above the built VAE, RSS). `lean`: the float32 lean decode, whose
    resnets run GroupNorm + SiLU + conv in row bands and write conv2 over conv1's output: the resnet's input
    and one C_0 output (C_1 + C_0; the row bands are `VAE_BAND_BYTES`, counted by the caller); measured at
    115 MiB above the built VAE (RSS) and 105 MiB of live tensors on the SD-shaped VAE at 256x256.
    Encode: conv_in's output, then the first resnet's input, GroupNorm, SiLU and conv outputs at C_0
    (5 x C_0).
    """
    c0 = block_out_channels[0]
    c1 = block_out_channels[1] if len(block_out_channels) > 1 else c0
    if decode and lean:
        return [
            Activations("upsampled input of the last up block's first resnet", 1, c1, height * width),
            Activations("its conv1 output, overwritten by conv2's", 1, c0, height * width),
        ]
    if decode:
        return [Activations("upsampled input, GroupNorm, SiLU", 3, c1, height * width)]
    return [Activations("conv_in out, resnet input, GroupNorm, SiLU, conv out", 5, c0, height * width)]


def text_encoder_activations(hidden_size: int, tokens: int) -> list[Activations]:
    """A CLIP/T5 encoder layer per token: the residual, q, k, v, out (5 x hidden) and the 4x MLP."""
    return [
        Activations("residual, q, k, v, out", 5, hidden_size, tokens),
        Activations("MLP (4x)", 4, hidden_size, tokens),
    ]


# Z-Image's text encoder (Qwen3-4B): the sizes assumed where a folder's config.json is not at hand.
QWEN3_4B: dict[str, Any] = dict(
    hidden_size=2560,
    intermediate_size=9728,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
)


def chat_encoder_activations(config: dict[str, Any], tokens: int) -> list[Activations]:
    """A decoder-only LLM used as a text encoder (Z-Image's Qwen3) over `tokens`, its `config.json` given.

    The pipelines ask for every layer's hidden state (`output_hidden_states=True`, to take the second to
    last) and leave transformers' default KV cache on, so both grow with the depth:
    - one hidden state per layer plus the embeddings ((layers + 1) x hidden);
    - the cache's keys and values (layers x 2 x kv_heads x head_dim);
    - the widest moment of one layer: its SwiGLU MLP's gate, up and gated product (3 x intermediate) beside
      the residual (1 x hidden).
    Measured on Qwen3-4B at 4 to 36 layers (tests/test_family_zimage.py): within 2% of the live tensors.
    """
    config = {**QWEN3_4B, **config}
    hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    kv_width = int(config.get("num_key_value_heads") or heads) * head_dim
    return [
        Activations("hidden states of every layer", layers + 1, hidden, tokens),
        Activations("KV cache", 2 * layers, kv_width, tokens),
        Activations(
            "one layer's SwiGLU: gate, up, product",
            3,
            int(config["intermediate_size"]),
            tokens,
        ),
        Activations("the residual beside it", 1, hidden, tokens),
    ]


def chat_encoder_working_bytes(config: dict[str, Any], tokens: int, dtype: torch.dtype) -> int:
    """Activation bytes of one prompt through a chat-LLM text encoder (`chat_encoder_activations`)."""
    large = activation_bytes(chat_encoder_activations(config, tokens), batch=1, dtype=dtype)
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`


def diffusion_working_bytes(
    kind: str,
    *,
    height: int,
    width: int,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
    block_out_channels: tuple[int, ...] = (320, 640, 1280, 1280),
    layers_per_block: int = 2,
    attention_level: int = 0,
    vae_scale: int = 8,
    patch_size: int = 2,
    guidance: bool = True,
    text_tokens: int = 77,
    hidden_size: int = 768,
) -> int:
    """Activation bytes of one call of a diffusion component at `height` x `width` pixels.

    kind: "denoiser" (UNet facts; batch doubled under classifier-free guidance), "dit" (`hidden_size` wide,
    `patch_size` latent pixels a side per token, plus `text_tokens` joint-attention tokens), "vae_decode" /
    "vae_encode" (pass the VAE's block_out_channels, SD: 128, 256, 512, 512) or "text_encoder".
    """
    rows = batch * (2 if guidance else 1)  # the batch a call sees: doubled under CFG
    bands = 0
    if kind == "denoiser":
        tokens = (height // vae_scale) * (width // vae_scale)
        terms = unet_activations(block_out_channels, layers_per_block, tokens, attention_level)
    elif kind == "dit":
        side = vae_scale * patch_size
        terms = dit_activations(hidden_size, (height // side) * (width // side) + text_tokens)
    elif kind in ("vae_decode", "vae_encode"):
        c1 = block_out_channels[1] if len(block_out_channels) > 1 else block_out_channels[0]
        lean = kind == "vae_decode" and lean_resnets_run(batch * c1 * height * width, dtype)
        terms = vae_activations(block_out_channels, height, width, decode=kind == "vae_decode", lean=lean)
        rows = batch  # decoded once per picture, guidance or not
        # The lean resnets' row bands: the band read and its normalized copy, and the conv kernel's copies of
        # a band's input and output (live tensors 9 MiB above C_1 + C_0 at 256 and 512 px; RSS 19 MiB).
        bands = VAE_BAND_BYTES * 4 if lean else 0
    elif kind == "text_encoder":
        terms = text_encoder_activations(hidden_size, text_tokens)
    else:
        raise ValueError(f"no working-memory formula for kind {kind!r}")
    large = activation_bytes(terms, batch=rows, dtype=dtype) + bands
    # Beside the large tensors live small ones (time embeddings, the text context, norm statistics, the
    # latents): 1/64 more covers them at every size measured.
    return large + large // 64
