"""Krea 2's reference latents in the denoiser, as ComfyUI's model places them (diffusers' transformer has none).

Lives here: `reference_tokens`, `krea2_forward`, `REFERENCE_METHODS`, `TIMESTEP_ZERO`. May import: torch,
torch.nn.functional, pipelines.diffusion.flow_sampling.

From ComfyUI's `SingleStreamDiT._forward` (comfy/ldm/krea2/model.py, "Implement regular and timestep zero
reference images to krea 2", PR 14843) and `model_base.Krea2.extra_conds`: the prompt's `reference_latents`
are read only when the conditioning names a `reference_latents_method` (FluxKontextMultiReferenceLatentMethod;
Krea 2 has no default, so without one they are ignored). Each reference is padded circularly to the 2x2
patches, packed like the image and appended after the image's tokens, at rotary positions (i, row, col) for
the i-th reference (1-based; the image is at index 0). Under "index_timestep_zero" every block modulates the
reference tokens with the timestep-0 embedding (a clean picture) and the rest with the step's; any other method
("offset", "index", "uxo") keeps the step's for all. Only the image's tokens are read back.

`krea2_forward` is diffusers' `Krea2Transformer2DModel.forward` written out with a per-token modulation: the
blocks themselves are called (so streaming and step-cache hooks on them still fire); with every token on one
timestep it equals the library's forward (tests/test_krea2_style_reference.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipelines.diffusion.flow_sampling import pack_latents

REFERENCE_METHODS = ("offset", "index", "uxo", "index_timestep_zero")  # what ComfyUI's node sets
TIMESTEP_ZERO = "index_timestep_zero"


def reference_tokens(
    references: list[torch.Tensor], batch: int, device: torch.device | str, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed reference tokens (batch, tokens, C x 4) and their rotary positions (tokens, 3)."""
    tokens, ids = [], []
    for index, ref in enumerate(references, 1):
        h, w = ref.shape[-2:]
        ref = F.pad(
            ref, (0, (-w) % 2, 0, (-h) % 2), mode="circular"
        )  # comfy.ldm.common_dit.pad_to_patch_size
        ref = ref.to(device=device, dtype=dtype).expand(batch, -1, -1, -1)
        tokens.append(pack_latents(ref))
        rows, cols = ref.shape[-2] // 2, ref.shape[-1] // 2
        grid = torch.zeros(rows, cols, 3, device=device)
        grid[..., 0] = index
        grid[..., 1] = torch.arange(rows, device=device)[:, None]
        grid[..., 2] = torch.arange(cols, device=device)[None, :]
        ids.append(grid.reshape(rows * cols, 3))
    return torch.cat(tokens, dim=1), torch.cat(ids, dim=0)


def _modulation(
    model: torch.nn.Module, timestep: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    temb = model.time_embed(timestep, dtype=dtype)
    return temb, model.time_mod_proj(F.gelu(temb, approximate="tanh"))


def krea2_forward(
    model: torch.nn.Module,
    hidden_states: torch.Tensor,
    references: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    timestep: torch.Tensor,
    position_ids: torch.Tensor,
    encoder_attention_mask: torch.Tensor | None,
    *,
    timestep_zero: bool,
) -> torch.Tensor:
    """The velocity of the image tokens (batch, image tokens, C x 4) with the reference tokens appended;
    `position_ids` cover text, image and references in that order."""
    batch, image_tokens, _ = hidden_states.shape
    text_tokens = encoder_hidden_states.shape[1]
    tokens = hidden_states.shape[1] + references.shape[1]
    dtype = hidden_states.dtype

    temb, temb_mod = _modulation(model, timestep, dtype)  # (B, 1, H), (B, 1, 6H)
    if timestep_zero:  # the references' rows take t = 0's modulation
        _, zero_mod = _modulation(model, torch.zeros_like(timestep), dtype)
        rows = torch.arange(text_tokens + tokens, device=hidden_states.device)
        is_ref = (rows >= text_tokens + image_tokens)[None, :, None]
        temb_mod = torch.where(is_ref, zero_mod, temb_mod)  # (B, L, 6H): the blocks broadcast per token

    text_mask, attention_mask = None, None
    if encoder_attention_mask is not None:
        text_mask = encoder_attention_mask[:, None, None, :]
        rest = encoder_attention_mask.new_ones((batch, tokens))
        attention_mask = torch.cat([encoder_attention_mask, rest], dim=1)[:, None, None, :]

    text = model.txt_in(model.text_fusion(encoder_hidden_states, attention_mask=text_mask))
    image = model.img_in(torch.cat([hidden_states, references], dim=1))
    states = torch.cat([text, image], dim=1)
    rotary = model.rotary_emb(position_ids)
    for block in model.transformer_blocks:
        states = block(states, temb_mod, rotary, attention_mask)
    return model.final_layer(states[:, text_tokens : text_tokens + image_tokens], temb)
