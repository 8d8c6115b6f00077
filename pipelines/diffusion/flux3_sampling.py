"""The FLUX.3 denoising loop, written out like diffusers' modular `Flux3AutoBlocks` (text to image), and its
working memory.

Lives here: `sample_flux3`, `flux3_working_bytes`, `image_ids`, `text_ids`, `IMAGE_ROPE_SCALE`. May import:
stdlib, numpy, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

diffusers 0.42.1 has no FLUX.3 `DiffusionPipeline`; its modular blocks (modular_pipelines/flux3: the timesteps,
latents, text-rope, denoise and decode steps) are the reference. A FLUX.3 LATENT is FLUX.2's (the VAE's own
layout, normalised by its batch-norm statistics in the 2x2-patchified space, `flux2_latents`). What differs from
FLUX.2's loop: the noise is drawn in float32 then cast (the pipeline's seed compatibility with the reference
code); the image's rotary ids are (0, h, w, 0) with h and w scaled by 0.5 and the text's (0, 0, 0, l), unbatched;
the schedule is sigmas 1 -> 1/steps under the scheduler's constant shift (6.93), no dynamic shift; guidance is
the guider's classifier-free `neg + cfg * (pos - neg)` when cfg > 1 (two transformer calls a step, the wired
negative's text). A step-distilled (flow-map) transformer (`flow_map` in its config, `Flux3DistilledModular
Pipeline`) takes no guidance and also gets the timestep each step jumps to. Text to image only: the reference
image tokens (`image_cond_*`) and the layout prompts are not done.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from memory.estimates import element_size
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flux2_latents import unpatchify
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep

IMAGE_ROPE_SCALE = 0.5  # Flux3PrepareLatentsStep's `image_rope_scale`: the model's training positions


def image_ids(grid_h: int, grid_w: int, device: torch.device | str) -> torch.Tensor:
    """`_prepare_image_ids`: (grid_h * grid_w, 4) ids (t, h, w, l) = (0, h * 0.5, w * 0.5, 0)."""
    ids = torch.cartesian_prod(
        torch.arange(1), torch.arange(grid_h), torch.arange(grid_w), torch.tensor([0])
    ).to(dtype=torch.float32)
    ids[:, 1:3] = ids[:, 1:3] * IMAGE_ROPE_SCALE
    return ids.to(device)


def text_ids(tokens: int, device: torch.device | str) -> torch.Tensor:
    """`Flux3TextRoPEInputsStep._prepare_text_ids`: (tokens, 4) ids (0, 0, 0, l); text runs along l."""
    ids = torch.cartesian_prod(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(tokens))
    return ids.to(dtype=torch.float32, device=device)


def flux3_working_bytes(
    config: dict[str, Any], image_tokens: int, text_tokens: int, dtype: torch.dtype
) -> int:
    """Activation bytes of one `Flux3Transformer2DModel` call: every token's two modulation sets (early and
    single stream, 6 widths each, kept through the blocks), and the widest moment inside a joint single block over
    text and image tokens together: q, k, v and the attention output (4), the residual (1), the normed and
    modulated input (2) and the MLP's gated input (2 x mlp_ratio). Checked against the live tensors of the class
    defaults' widths on the meta device (tests/test_family_flux3.py): 1.02-1.05x from 512 to 1536 px."""
    hidden = int(config.get("num_attention_heads", 24)) * int(config.get("attention_head_dim", 128))
    ratio = float(config.get("mlp_ratio", 3.0))
    widths = 12 + 4 + 1 + 2 + 2 * ratio
    large = int((image_tokens + text_tokens) * hidden * widths) * element_size(dtype)
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`


@torch.no_grad()
def sample_flux3(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs
    title = denoiser.family.title
    latent_channels = int(denoiser.config.get("in_channels", 128)) // 4
    check_flow_inputs(
        denoiser, latents, settings, channels=latent_channels, any_empty_channels=True, img2img=False
    )
    device = mm.device
    batch, _, h, w = latents.samples.shape
    flow_map = bool(denoiser.config.get("flow_map"))
    do_cfg = settings.cfg > 1.0 and not flow_map and negative is not None
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: float32 noise in the patchified shape, cast, packed to (B, tokens, 4C)
    noise = randn_tensor(
        (batch, latent_channels * 4, h // 2, w // 2),
        generator=generator,
        device=torch.device(device),
        dtype=torch.float32,
    ).to(dtype)
    x = noise.flatten(2).transpose(1, 2)
    img_ids = image_ids(h // 2, w // 2, device)

    # 3. Prepare timesteps: sigmas 1 -> 1/steps under the scheduler's constant shift
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / settings.steps, settings.steps), device=device)
    scheduler.set_begin_index(0)
    timesteps = scheduler.timesteps

    # 4. Prepare conditioning: each prompt's window with its (0, 0, 0, l) ids
    def text(cond: Conditioning) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = batched_conditioning(cond, batch).embeds.to(device=device, dtype=dtype)
        return embeds, text_ids(embeds.shape[1], device)

    if positive.references:
        raise ValueError(f"{title}: reference pictures (image-to-image editing) are not supported here")
    pos_embeds, pos_ids = text(positive)
    neg_embeds, neg_ids = text(negative) if do_cfg and negative is not None else (None, None)

    # 5. Denoising loop
    text_tokens = max(e.shape[1] for e in (pos_embeds, neg_embeds) if e is not None)
    working = Working(
        batch * flux3_working_bytes(denoiser.config, x.shape[1], text_tokens, dtype),
        f"{batch}x{h * latents.vae_scale_factor}x{w * latents.vae_scale_factor}+{text_tokens}t",
    )
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: _unpack(z, h, w))
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = (t / 1000).expand(batch).to(x.dtype)
            extra: dict[str, torch.Tensor] = {}
            if flow_map:  # the timestep this step jumps to: the next one, 0 after the last
                next_t = timesteps[i + 1] if i + 1 < len(timesteps) else torch.zeros_like(t)
                extra["target_timestep"] = (next_t / 1000).expand(batch).to(x.dtype)
            model_input = x.to(dtype)
            with cache.branch("cond"):
                noise_pred = model(
                    hidden_states=model_input,
                    encoder_hidden_states=pos_embeds,
                    timestep=timestep,
                    img_ids=img_ids,
                    txt_ids=pos_ids,
                    return_dict=False,
                    **extra,
                )[0]
            if do_cfg:
                with cache.branch("uncond"):
                    neg_pred = model(
                        hidden_states=model_input,
                        encoder_hidden_states=neg_embeds,
                        timestep=timestep,
                        img_ids=img_ids,
                        txt_ids=neg_ids,
                        return_dict=False,
                    )[0]
                noise_pred = neg_pred + settings.cfg * (noise_pred - neg_pred)

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=_unpack(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )


def _unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(B, h/2 * w/2, 4C) tokens -> the LATENT layout (B, C, h, w)."""
    b, _, c4 = tokens.shape
    return unpatchify(tokens.transpose(1, 2).reshape(b, c4, h // 2, w // 2))
