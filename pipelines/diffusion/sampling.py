"""What every denoising loop shares: the settings, the step report, the conditioning batch, one denoiser call.

Lives here: `SamplerSettings`, `batched_conditioning`, `same_length`,
`unet_conditioning`, `denoiser_working_bytes`, `denoiser_working`.
May import: stdlib, torch, memory, pipelines.diffusion.values, pipelines.diffusion.working.

The loops themselves build on this module: the DDPM-style loop and the one entry `sample` in
`pipelines.diffusion.denoising`, ComfyUI's k-diffusion samplers in `k_sampling`, the flow-matching loops
(Flux, SD3) in `flow_sampling`. Nothing here imports them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from memory import Working
from pipelines.diffusion.step_cache import StepCache
from pipelines.diffusion.values import Conditioning, DenoiserRef
from pipelines.diffusion.working import diffusion_working_bytes


@dataclass(frozen=True)
class SamplerSettings:
    scheduler: str = "dpmpp_2m"
    steps: int = 20
    cfg: float = 4.0
    seed: int = 42
    # 1.0: start from pure noise (text-to-image; the input latent only gives the shape). Below 1: noise the
    # input latent to that fraction of the schedule and denoise from there (image-to-image).
    denoise: float = 1.0
    eta: float = 0.0  # DDIM's eta, as the pipelines pass it
    # The k-diffusion samplers (scheduler "k_<name>", see k_sampling): ComfyUI's `scheduler`, and
    # KSamplerAdvanced's segment: run steps [start_step, end_step) of the schedule, optionally without
    # adding noise first and keeping the leftover noise at the end.
    sigma_schedule: str = "normal"
    start_step: int = 0
    end_step: int = 10000
    add_noise: bool = True
    force_full_denoise: bool = True
    # A step cache on the DiT families' blocks (pipelines.diffusion.step_cache): off gives the exact picture.
    cache: str = "off"
    cache_threshold: float = 0.1
    # A hand-given schedule (a SIGMAS wire: ComfyUI's ManualSigmas and friends), stepped through as it is by the
    # loops of `manual_sigmas.SIGMA_LOOPS`; None: the scheduler's own from `steps`.
    sigmas: tuple[float, ...] | None = None
    # How the positive and negative predictions combine (`pipelines.diffusion.guidance`): the family's
    # diffusers rule, or ComfyUI's where an imported Qwen-Image graph asks for it; cfg_norm: CFGNorm's strength.
    cfg_rule: str = "pipeline"
    cfg_norm: float = 1.0

    @property
    def step_cache(self) -> StepCache:
        return StepCache(self.cache, self.cache_threshold)


def denoiser_working_bytes(
    ref: DenoiserRef, height: int, width: int, batch: int, guidance: bool, text_tokens: int | None = None
) -> int:
    """Activation estimate for one denoiser call (pipelines.diffusion.working's UNet and DiT facts). The
    manager replaces it by the measured peak once the node has run. `text_tokens`: the caption tokens that
    join the image tokens, where the loop knows them (Z-Image); else the family's `joint_text_tokens`."""
    config = ref.config
    common = dict(height=height, width=width, batch=batch, dtype=ref.dtype, vae_scale=ref.vae_scale_factor)
    if "block_out_channels" in config:  # UNet
        layers = config.get("layers_per_block", 2)
        layers = max(layers) if isinstance(layers, list) else int(layers)
        down = list(config.get("down_block_types") or ["CrossAttnDownBlock2D"])
        attention = next((i for i, b in enumerate(down) if "Attn" in b), 0)
        return diffusion_working_bytes(
            "denoiser",
            block_out_channels=tuple(config["block_out_channels"]),
            layers_per_block=layers,
            attention_level=attention,
            guidance=guidance,
            **common,
        )
    # DiT: hidden = heads x head_dim at every block (Z-Image's config names it `dim`). Flux packs 2x2 latent
    # pixels into a token itself (FluxPipeline._pack_latents), so its config says patch_size 1.
    hidden = int(config.get("num_attention_heads", 16)) * int(config.get("attention_head_dim", 72))
    hidden = int(config.get("dim", hidden))
    patch_size = config.get("patch_size", 2) or 2
    if isinstance(patch_size, (list, tuple)):  # video DiTs (Wan, MiniMax H3): (t, h, w); the side is h
        patch_size = patch_size[-1]
    patch = 2 if ref.family.packs_latents else int(patch_size)
    if config.get("all_patch_size"):  # Z-Image: the patch sizes it was trained with; pipelines use the first
        patch = int(config["all_patch_size"][0])
    return diffusion_working_bytes(
        "dit",
        hidden_size=hidden,
        patch_size=patch,
        text_tokens=ref.family.joint_text_tokens if text_tokens is None else text_tokens,
        guidance=guidance,
        **common,
    )


def denoiser_working(
    ref: DenoiserRef, height: int, width: int, batch: int, guidance: bool, text_tokens: int | None = None
) -> Working:
    """The formula plus the shape it depends on: the manager replaces the formula by the measured peak
    for this shape once one exists."""
    formula = denoiser_working_bytes(ref, height, width, batch, guidance, text_tokens)
    shape = f"{batch}x{height}x{width}" + ("+cfg" if guidance else "")
    return Working(formula, shape if text_tokens is None else f"{shape}+{text_tokens}t")


def batched_conditioning(cond: Conditioning, batch: int) -> Conditioning:
    """Repeat a one-prompt conditioning for a batch of latents (num_images_per_prompt)."""
    if cond.embeds.shape[0] == batch:
        return cond

    def rep(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.repeat(batch, *([1] * (t.ndim - 1)))

    return Conditioning(
        embeds=rep(cond.embeds),
        pooled=rep(cond.pooled),
        attention_mask=rep(cond.attention_mask),
        family=cond.family,
        text=cond.text,
        controls=cond.controls,
    )


def same_length(conds: list[Conditioning]) -> list[Conditioning]:
    """Make the positive and negative token counts equal by repeating each to their least common multiple.

    Long prompts are 77 * n tokens (prompt_weights.py), so under CFG a 2-chunk positive meets a 1-chunk
    negative; ComfyUI repeats both to the LCM (`CONDCrossAttn.concat`), which leaves cross-attention's
    softmax over each prompt unchanged.
    """
    lengths = {c.embeds.shape[1] for c in conds}
    if len(lengths) == 1 or any(c.attention_mask is not None for c in conds):
        return conds
    target = math.lcm(*lengths)
    return [dataclasses.replace(c, embeds=c.embeds.repeat(1, target // c.embeds.shape[1], 1)) for c in conds]


def unet_conditioning(
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    do_cfg: bool,
    batch: int,
    pixel_size: tuple[int, int],
    device: torch.device | str,
) -> tuple[Conditioning, dict[str, torch.Tensor] | None]:
    """The text conditioning of one UNet call: negative then positive as one doubled batch under CFG, and
    SDXL's pooled embeddings and size ids (`added_cond_kwargs`). `positive` is already batched."""
    conds = (
        [batched_conditioning(negative, batch), positive] if do_cfg and negative is not None else [positive]
    )
    conds = same_length(conds)
    embeds = torch.cat([c.embeds for c in conds]).to(device=device, dtype=denoiser.dtype)
    mask = None
    if positive.attention_mask is not None:
        mask = torch.cat([c.attention_mask for c in conds]).to(device)
    cond = Conditioning(embeds=embeds, attention_mask=mask, family=denoiser.family.name)
    if not denoiser.family.size_conditioning:
        return cond, None
    time_ids = _sdxl_time_ids(*pixel_size, embeds.dtype).repeat(batch, 1)
    return cond, {
        "text_embeds": torch.cat([c.pooled for c in conds]).to(device=device, dtype=denoiser.dtype),
        "time_ids": torch.cat([time_ids] * len(conds)).to(device),
    }


def _sdxl_time_ids(height: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    # SDXL's size conditioning: original_size + crops_coords_top_left + target_size (no crop, no resize).
    return torch.tensor([[height, width, 0, 0, height, width]], dtype=dtype)


def _predict_noise(
    model: torch.nn.Module,
    ref: DenoiserRef,
    x: torch.Tensor,
    t: torch.Tensor,
    cond: Conditioning,
    added_cond_kwargs: dict[str, Any] | None,
    control_residuals: dict[str, Any] | None = None,
) -> torch.Tensor:
    """One denoiser call on a (possibly CFG-doubled) batch; `control_residuals` are ControlNets' outputs."""
    if ref.family.denoiser_call == "pixart":
        # PixArt takes the timestep as a batch vector and returns (noise, variance) when it learned sigma.
        timestep = t[None].to(x.device).expand(x.shape[0]) if t.ndim == 0 else t.expand(x.shape[0])
        out = model(
            x,
            encoder_hidden_states=cond.embeds,
            encoder_attention_mask=cond.attention_mask,
            timestep=timestep,
            added_cond_kwargs={"resolution": None, "aspect_ratio": None},
            return_dict=False,
        )[0]
        if model.config.out_channels // 2 == x.shape[1]:
            out = out.chunk(2, dim=1)[0]
        return out
    return model(
        x,
        t,
        encoder_hidden_states=cond.embeds,
        timestep_cond=None,
        added_cond_kwargs=added_cond_kwargs,
        return_dict=False,
        **(control_residuals or {}),
    )[0]
