"""The flow-matching denoising loops (Flux, SD3), written out like diffusers' FluxPipeline.__call__ and
StableDiffusion3Pipeline.__call__.

Lives here: `sample_flux`, `sample_sd3`, `calculate_shift`, `config_shift`, `pack_latents`, `unpack_latents`,
`latent_image_ids`, `kontext_reference`, `start_partway`. The input checks and the step report every flow loop
shares are in `flow_loop` (`check_flow_scheduler` is still imported from here by the LTX-2 loop).
May import: stdlib, numpy, torch, diffusers, memory, pipelines.diffusion.*.

Differences from the DDPM-style loop in sampling.py: the scheduler is the model's flow-matching Euler and
the noise is not scaled by `init_noise_sigma`; image-to-image mixes with `scale_noise`. Flux packs the latents
as 2x2 patches (tokens), shifts its sigmas by the image size (`mu`), and takes guidance as an input of the
transformer (distilled, Flux-dev) rather than a second batch: diffusers' default `true_cfg_scale=1`, so the
negative prompt is not used; a reference picture on the prompt (FLUX.1 Kontext, FluxKontextPipeline) joins
the sequence after the noisy tokens. SD3 runs classic classifier-free guidance on a doubled batch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs, check_flow_scheduler
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import (
    SamplerSettings,
    batched_conditioning,
    denoiser_working,
    same_length,
)
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep


# Copied from diffusers.pipelines.flux.pipeline_flux.calculate_shift
def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    mu = image_seq_len * m + b
    return mu


def config_shift(
    config: Any, image_seq_len: int, *, max_image_seq_len: int = 4096, max_shift: float = 1.15
) -> float:
    """`calculate_shift` on a scheduler config's sequence lengths and shifts; where the config has none, the
    pipeline's defaults (FluxPipeline's; the keywords carry the families' other ones: Krea 2's longest
    sequence 6400, SD3's largest shift 1.16)."""
    return calculate_shift(
        image_seq_len,
        config.get("base_image_seq_len", 256),
        config.get("max_image_seq_len", max_image_seq_len),
        config.get("base_shift", 0.5),
        config.get("max_shift", max_shift),
    )


def pack_latents(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H/2 * W/2, C * 4): one token per 2x2 patch."""
    b, c, h, w = latents.shape
    latents = latents.view(b, c, h // 2, 2, w // 2, 2)
    latents = latents.permute(0, 2, 4, 1, 3, 5)  # (B, H/2, W/2, C, 2, 2)
    return latents.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(B, H/2 * W/2, C * 4) -> (B, C, H, W), `height`/`width` in latent pixels."""
    b, _, channels = latents.shape
    latents = latents.view(b, height // 2, width // 2, channels // 4, 2, 2)
    latents = latents.permute(0, 3, 1, 4, 2, 5)  # (B, C, H/2, 2, W/2, 2)
    return latents.reshape(b, channels // 4, height, width)


def latent_image_ids(height: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """(H/2 * W/2, 3) rotary positions of the patch tokens: (0, row, column)."""
    ids = torch.zeros(height // 2, width // 2, 3)
    ids[..., 1] = ids[..., 1] + torch.arange(height // 2)[:, None]
    ids[..., 2] = ids[..., 2] + torch.arange(width // 2)[None, :]
    return ids.reshape(-1, 3).to(dtype=dtype)


def kontext_reference(
    cond: Conditioning, batch: int, dtype: torch.dtype, device: torch.device | str
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """FLUX.1 Kontext's reference picture (a Reference Latent on the prompt): its packed latent tokens, repeated
    for the batch, and their ids (1, row, column): time coordinate 1 tells them from the noisy tokens, as
    `FluxKontextPipeline.prepare_latents` sets `image_ids[..., 0] = 1`. (None, None) without a reference."""
    if not cond.references:
        return None, None
    if len(cond.references) > 1:
        raise ValueError(
            f"FLUX.1 Kontext reads one reference picture here (as FluxKontextPipeline); the prompt has "
            f"{len(cond.references)}: stitch them into one picture first (Image Stitch)"
        )
    ref = cond.references[0].samples[:1].to(device=device, dtype=dtype)
    _, _, rh, rw = ref.shape
    if rh % 2 or rw % 2:
        raise ValueError(f"the reference latent must have even sides (2x2 patches), got {rh}x{rw}")
    ids = latent_image_ids(rh, rw, dtype)
    ids[..., 0] = 1
    return pack_latents(ref).repeat(batch, 1, 1), ids.to(device)


def start_partway(scheduler: FlowMatchEulerDiscreteScheduler, settings: SamplerSettings) -> torch.Tensor:
    """The timesteps to run: all of them, or the last `denoise` fraction (as the Img2Img pipelines' get_timesteps)."""
    timesteps = scheduler.timesteps
    t_start = 0
    if settings.denoise < 1.0:
        t_start = int(max(settings.steps - min(settings.steps * settings.denoise, settings.steps), 0))
        timesteps = timesteps[t_start * scheduler.order :]
    scheduler.set_begin_index(t_start * scheduler.order)
    return timesteps


@torch.no_grad()
def sample_flux(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs
    check_flow_inputs(denoiser, latents, settings)
    device = mm.device
    batch, _, h, w = latents.samples.shape
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    positive = batched_conditioning(positive, batch)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: noise in the unpacked shape (as diffusers draws it), then packed
    noise = randn_tensor(
        tuple(latents.samples.shape),
        generator=generator,
        device=torch.device(device),
        dtype=positive.embeds.dtype,
    )
    img_ids = latent_image_ids(h, w, positive.embeds.dtype).to(device)
    txt_ids = torch.zeros(positive.embeds.shape[1], 3).to(device=device, dtype=positive.embeds.dtype)
    refs, ref_ids = kontext_reference(positive, batch, noise.dtype, device)
    if refs is not None:  # FLUX.1 Kontext: the picture's tokens follow the noisy ones, as FluxKontextPipeline
        img_ids = torch.cat([img_ids, ref_ids], dim=0)

    # 3. Prepare timesteps: sigmas 1 -> 1/steps, shifted for the image's token count
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    sigmas = np.linspace(1.0, 1 / settings.steps, settings.steps)
    config = scheduler.config
    mu = config_shift(config, (h // 2) * (w // 2))
    scheduler.set_timesteps(sigmas=sigmas, device=device, mu=mu)
    timesteps = start_partway(scheduler, settings)
    if len(timesteps) == 0:
        return latents
    if settings.denoise >= 1.0:
        x = pack_latents(noise)
    else:
        init = latents.samples.to(device=device, dtype=noise.dtype)
        x = pack_latents(scheduler.scale_noise(init, timesteps[:1].repeat(batch), noise))

    # 4. Prepare conditioning; distilled guidance is an input of the transformer
    embeds = positive.embeds.to(device=device, dtype=dtype)
    pooled = positive.pooled.to(device=device, dtype=dtype)
    guidance = None
    if denoiser.config.get("guidance_embeds", False):
        guidance = torch.full([1], settings.cfg, device=device, dtype=torch.float32).expand(batch)

    # 5. Denoising loop
    working = denoiser_working(
        denoiser, h * latents.vae_scale_factor, w * latents.vae_scale_factor, batch, guidance=False
    )
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: unpack_latents(z, h, w))
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = t.expand(batch).to(x.dtype)

            with cache.branch("cond"):
                noise_pred = model(
                    hidden_states=x if refs is None else torch.cat([x, refs], dim=1),
                    timestep=timestep / 1000,
                    guidance=guidance,
                    pooled_projections=pooled,
                    encoder_hidden_states=embeds,
                    txt_ids=txt_ids,
                    img_ids=img_ids,
                    return_dict=False,
                )[0][:, : x.shape[1]]  # the reference tokens' predictions are dropped

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=unpack_latents(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )


@torch.no_grad()
def sample_sd3(
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
    check_flow_scheduler(denoiser, settings)
    device = mm.device
    batch, _, h, w = latents.samples.shape
    do_cfg = settings.cfg > 1.0 and negative is not None
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    positive = batched_conditioning(positive, batch)

    # 2. Prepare latent variables
    noise = randn_tensor(
        tuple(latents.samples.shape),
        generator=generator,
        device=torch.device(device),
        dtype=positive.embeds.dtype,
    )

    # 3. Prepare timesteps (SD3.5-style configs may shift by the image size)
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    config = scheduler.config
    shift_kwargs = {}
    if config.get("use_dynamic_shifting", None):
        patch = int(denoiser.config.get("patch_size", 2))
        shift_kwargs["mu"] = config_shift(config, (h // patch) * (w // patch), max_shift=1.16)
    scheduler.set_timesteps(settings.steps, device=device, **shift_kwargs)
    timesteps = start_partway(scheduler, settings)
    if len(timesteps) == 0:
        return latents
    if settings.denoise >= 1.0:
        x = noise
    else:
        init = latents.samples.to(device=device, dtype=noise.dtype)
        x = scheduler.scale_noise(init, timesteps[:1].repeat(batch), noise)

    # 4. Prepare conditioning: negative first, then positive, as one doubled batch under CFG; as ComfyUI's
    # `CONDCrossAttn.can_concat`, prompts whose lengths repeat to more than 4x the shorter one (a 2-chunk
    # positive, 154 + 256 tokens, beside a 77 + 256 negative: an LCM of 136530) run as two calls instead.
    conds = [batched_conditioning(negative, batch), positive] if do_cfg else [positive]
    lengths = [c.embeds.shape[1] for c in conds]
    if math.lcm(*lengths) // min(lengths) <= 4:
        conds = same_length(conds)
    groups = [conds] if len({c.embeds.shape[1] for c in conds}) == 1 else [[c] for c in conds]
    inputs = [
        (
            torch.cat([c.embeds for c in g]).to(device=device, dtype=denoiser.dtype),
            torch.cat([c.pooled for c in g]).to(device=device, dtype=denoiser.dtype),
        )
        for g in groups
    ]

    # 5. Denoising loop
    working = denoiser_working(
        denoiser, h * latents.vae_scale_factor, w * latents.vae_scale_factor, batch, guidance=do_cfg
    )
    report = StepReport(on_step, len(timesteps), scheduler)
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            with cache.branch("cfg" if do_cfg else "cond"):
                preds = []
                for embeds, pooled in inputs:
                    model_input = torch.cat([x] * (embeds.shape[0] // batch))
                    preds.append(
                        model(
                            hidden_states=model_input,
                            timestep=t.expand(model_input.shape[0]),
                            encoder_hidden_states=embeds,
                            pooled_projections=pooled,
                            return_dict=False,
                        )[0]
                    )
                noise_pred = torch.cat(preds)

            if do_cfg:
                noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
                noise_pred = noise_pred_uncond + settings.cfg * (noise_pred_text - noise_pred_uncond)

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(samples=x.cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled")
