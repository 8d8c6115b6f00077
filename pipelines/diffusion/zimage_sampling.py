"""The Z-Image denoising loop, written out like diffusers' `ZImagePipeline.__call__`.

Lives here: `sample_zimage`, `get_default_z_image_sigmas`, `zimage_guidance`, `caption_tokens`, `zimage_working`,
`CFG_NORMALIZATION`, `CFG_TRUNCATION`. May import: stdlib, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

What differs from the other flow-matching loops (flow_sampling.py): the transformer takes lists (one
(C, 1, h, w) latent and one variable-length caption per sample) and a timestep running 0 -> 1 as
`(1000 - t) / 1000`; it predicts the negated velocity. Classifier-free guidance is the pipeline's rule
`pos + g * (pos - neg)` (so `g = 0` is no guidance and `g` is not SD's `neg + g * (pos - neg)`), applied per
sample in float32, with the pipeline's optional norm cap (`cfg_normalization`) and truncation (no guidance once
`(1000 - t) / 1000 > cfg_truncation`) at its defaults (off, 1.0). The latents stay float32 between steps, as
the pipeline keeps them. Image-to-image (denoise < 1) starts partway and mixes with `scale_noise`, as
`ZImageImg2ImgPipeline` does.
"""

from __future__ import annotations

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flow_sampling import config_shift, start_partway
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning, denoiser_working
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.sizes import config_patch_size
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep

# ZImagePipeline.__call__'s defaults for its two guidance options.
CFG_NORMALIZATION = 0.0  # 0: off; k > 0 caps the guided prediction's norm at k x the positive one's
CFG_TRUNCATION = 1.0  # guidance stops once (1000 - t) / 1000 exceeds this; 1.0 never stops it
_SEQ_MULTI_OF = 32  # the transformer pads image and caption tokens to multiples of this


# Copied from diffusers.pipelines.z_image.pipeline_z_image.get_default_z_image_sigmas
def get_default_z_image_sigmas(num_inference_steps: int) -> list[float]:
    return torch.linspace(1.0, 1 / num_inference_steps, num_inference_steps).tolist()


def zimage_guidance(
    pos: torch.Tensor, neg: torch.Tensor, scale: float, normalization: float = CFG_NORMALIZATION
) -> torch.Tensor:
    """One sample's guided prediction, as the pipeline's CFG block (float32 in, float32 out)."""
    pred = pos + scale * (pos - neg)
    if normalization > 0.0:
        ori_pos_norm = torch.linalg.vector_norm(pos)
        new_pos_norm = torch.linalg.vector_norm(pred)
        max_new_norm = ori_pos_norm * normalization
        if new_pos_norm > max_new_norm:
            pred = pred * (max_new_norm / new_pos_norm)
    return pred


def caption_tokens(positive: Conditioning, negative: Conditioning | None) -> int:
    """Caption tokens per row of a call: the transformer pads each caption to a multiple of 32 and the batch
    to its longest row (`SEQ_MULTI_OF` in diffusers' transformer_z_image)."""
    longest = max(c.embeds.shape[1] for c in (positive, negative) if c is not None)
    return -(-longest // _SEQ_MULTI_OF) * _SEQ_MULTI_OF


def zimage_working(
    denoiser: DenoiserRef,
    latents: Latents,
    positive: Conditioning,
    negative: Conditioning | None,
    *,
    guidance: bool,
) -> Working:
    """The transformer's working memory for one call of the loop (the doubled batch under guidance, captions
    padded as the transformer pads them): the figure both Z-Image loops give `use_denoiser`."""
    batch, _, h, w = latents.samples.shape
    return denoiser_working(
        denoiser,
        h * latents.vae_scale_factor,
        w * latents.vae_scale_factor,
        batch,
        guidance=guidance,
        text_tokens=caption_tokens(positive, negative if guidance else None),
    )


def _captions(
    cond: Conditioning, batch: int, device: torch.device | str, dtype: torch.dtype
) -> list[torch.Tensor]:
    """One (tokens, hidden) caption per sample: the transformer takes them as a list of any lengths."""
    embeds = batched_conditioning(cond, batch).embeds.to(device=device, dtype=dtype)  # (B, S, D)
    return list(embeds.unbind(0))


@torch.no_grad()
def sample_zimage(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
    cfg_normalization: float = CFG_NORMALIZATION,
    cfg_truncation: float = CFG_TRUNCATION,
) -> Latents:
    # 1. Check inputs
    patch = config_patch_size(denoiser.config)
    check_flow_inputs(
        denoiser, latents, settings, patch=patch, how=f"cuts the latents into {patch}x{patch} patches"
    )
    device = mm.device
    batch, _, h, w = latents.samples.shape
    do_cfg = settings.cfg > 0.0 and negative is not None  # the pipeline's `guidance_scale > 0`
    generator = torch.Generator("cpu").manual_seed(settings.seed)

    # 2. Prepare latent variables: float32 noise drawn as the pipeline draws it
    noise = randn_tensor(
        tuple(latents.samples.shape), generator=generator, device=torch.device(device), dtype=torch.float32
    )

    # 3. Prepare timesteps: sigmas 1 -> 1/steps, shifted for the image's token count where the config says so
    # "default": the class the folder was saved with; "euler": flow-matching Euler on the folder's settings.
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", denoiser.scheduler_config)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(denoiser.scheduler_config)
    # The pipeline counts 2x2 patches here, whatever the patch size.
    mu = config_shift(scheduler.config, (h // 2) * (w // 2))
    scheduler.set_timesteps(sigmas=get_default_z_image_sigmas(settings.steps), device=device, mu=mu)
    timesteps = start_partway(scheduler, settings)
    if len(timesteps) == 0:
        return latents
    if settings.denoise >= 1.0:
        x = noise
    else:
        init = latents.samples.to(device=device, dtype=torch.float32)
        x = scheduler.scale_noise(init, timesteps[:1].repeat(batch), noise)
    t_norms = ((1000 - timesteps.float()) / 1000).tolist()

    # 4. Prepare conditioning: positive captions first, then negative ones, as the pipeline lists them
    dtype = denoiser.dtype
    pos_caps = _captions(positive, batch, device, dtype)
    neg_caps = _captions(negative, batch, device, dtype) if do_cfg and negative is not None else []

    # 5. Denoising loop
    working = zimage_working(denoiser, latents, positive, negative, guidance=do_cfg)
    report = StepReport(on_step, len(timesteps), scheduler)
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = (1000 - t.expand(batch)) / 1000
            guidance = settings.cfg if t_norms[i] <= cfg_truncation else 0.0
            apply_cfg = do_cfg and guidance > 0

            model_input, captions = x.to(dtype), pos_caps
            if apply_cfg:  # one call on a doubled batch: the positives first, then the negatives
                model_input = model_input.repeat(2, 1, 1, 1)
                captions = pos_caps + neg_caps
                timestep = timestep.repeat(2)
            frames = list(model_input.unsqueeze(2).unbind(dim=0))  # B x (C, 1 frame, h, w)

            # One cache state per batch layout: CFG truncation turns the doubled batch into a single one.
            with cache.branch("cfg" if apply_cfg else "cond"):
                out = model(frames, timestep, captions, return_dict=False)[0]

            if apply_cfg:
                pos_out, neg_out = out[:batch], out[batch:]
                preds = [
                    zimage_guidance(p.float(), n.float(), guidance, cfg_normalization)
                    for p, n in zip(pos_out, neg_out, strict=True)
                ]
            else:
                preds = [o.float() for o in out]
            velocity = -torch.stack(preds, dim=0).squeeze(2)  # the transformer predicts -velocity

            before = x
            x = scheduler.step(velocity.to(torch.float32), t, x, return_dict=False)[0]
            report(i, t, before, x, velocity)

    return Latents(samples=x.cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled")
