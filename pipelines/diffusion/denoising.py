"""The denoising loop: our own, written out like a diffusers pipeline's `__call__`, one step at a time.

Lives here: `sample` (the one entry every Sampler calls: it checks the inputs, hands ComfyUI's k-diffusion
samplers to `k_sampling` and flow-matching models to `flow_sampling`, and runs the DDPM-style loop for SD,
SDXL and PixArt itself; Z-Image's loop is `zimage_sampling`, Qwen-Image's `qwenimage_sampling`, Wan's
`wan_sampling`), `predicted_original`.
May import: stdlib, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.* (the shared pieces every loop uses are in
`pipelines.diffusion.sampling`).

Why our own loop: each step reports a `pipelines.steps.Step` to a callback (progress, latent preview,
cancellation: the callback may raise; the node times the step), and the denoiser is held through
`mm.use(...)` with a working-memory estimate, so the memory manager loads it per policy and knows what the
step needs. The numerics are the diffusers pipelines'
(same noise draw, same scheduler calls, same CFG), so images match theirs for the same seed.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import torch
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager
from pipelines.diffusion.controlnet import ActiveControls
from pipelines.diffusion.flow_sampling import sample_flux, sample_sd3
from pipelines.diffusion.flux2_sampling import sample_flux2
from pipelines.diffusion.flux3_sampling import sample_flux3
from pipelines.diffusion.guidance import check_cfg_rule
from pipelines.diffusion.k_sampling import sample_k
from pipelines.diffusion.krea2_sampling import sample_krea2
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.ltx2_sampling import sample_ltx2
from pipelines.diffusion.manual_sigmas import SIGMA_LOOPS
from pipelines.diffusion.qwenimage21_sampling import sample_qwenimage21
from pipelines.diffusion.qwenimage_sampling import sample_qwenimage
from pipelines.diffusion.sampling import (
    SamplerSettings,
    _predict_noise,
    batched_conditioning,
    denoiser_working,
    unet_conditioning,
)
from pipelines.diffusion.schedulers import K_PREFIX, make_scheduler
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.diffusion.wan_k_sampling import sample_wan_k
from pipelines.diffusion.wan_sampling import sample_wan
from pipelines.diffusion.zimage_k_sampling import sample_zimage_k
from pipelines.diffusion.zimage_sampling import sample_zimage
from pipelines.steps import OnStep, Step


def predicted_original(scheduler: Any, step_output: Any) -> torch.Tensor | None:
    """x0 after a scheduler step: Euler/DDIM return it; DPM++/UniPC keep it as their last model output."""
    pred = getattr(step_output, "pred_original_sample", None)
    if pred is None:
        outputs = getattr(scheduler, "model_outputs", None)
        if outputs and outputs[-1] is not None:
            pred = outputs[-1]
    return pred


def _extra_step_kwargs(scheduler: Any, generator: torch.Generator, eta: float) -> dict[str, Any]:
    # As diffusers' prepare_extra_step_kwargs: only DDIM-like schedulers take eta, only stochastic ones a generator.
    accepted = set(inspect.signature(scheduler.step).parameters)
    kwargs: dict[str, Any] = {}
    if "eta" in accepted:
        kwargs["eta"] = eta
    if "generator" in accepted:
        kwargs["generator"] = generator
    return kwargs


def _inpaint_channels(
    denoiser: DenoiserRef, latents: Latents, do_cfg: bool, device: torch.device
) -> torch.Tensor | None:
    """The extra input channels an inpainting UNet expects, checked against its config."""
    wanted = int(denoiser.config.get("in_channels", latents.samples.shape[1])) - latents.samples.shape[1]
    given = 0 if latents.concat is None else latents.concat.shape[1]
    if wanted != given:
        if given == 0:
            raise ValueError(
                f"this denoiser takes {wanted} extra input channels (an inpainting model): feed its latent "
                "through Inpaint Conditioning (picture + mask)"
            )
        raise ValueError(f"the latent carries {given} inpainting channels but this denoiser takes {wanted}")
    if latents.concat is None:
        return None
    concat = latents.concat.to(device=device, dtype=denoiser.dtype)
    if concat.shape[0] != latents.samples.shape[0]:
        concat = concat.repeat(latents.samples.shape[0] // concat.shape[0], 1, 1, 1)
    return torch.cat([concat] * 2) if do_cfg else concat


def _keep_unmasked(
    scheduler: Any,
    x: torch.Tensor,
    keep: tuple[torch.Tensor, torch.Tensor],
    noise: torch.Tensor,
    timesteps: torch.Tensor,
    i: int,
) -> torch.Tensor:
    """Outside the noise mask, put back the original latents noised to the next step's level (exact at the
    last step), as diffusers' StableDiffusionInpaintPipeline does for 4-channel UNets."""
    mask, original = keep
    if i < len(timesteps) - 1:
        original = scheduler.add_noise(original, noise, timesteps[i + 1 : i + 2].repeat(original.shape[0]))
    return (1 - mask) * original + mask * x


@torch.no_grad()
def sample(
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
    family = denoiser.family.name
    for name, cond in (("positive", positive), ("negative", negative)):
        if cond is not None and cond.family != family:
            raise ValueError(f"{name} conditioning is for {cond.family!r}, the denoiser is {family!r}")
    if not 0.0 < settings.denoise <= 1.0:
        raise ValueError(f"denoise must be in (0, 1], got {settings.denoise}")
    check_cfg_rule(settings.cfg_rule, denoiser.family.denoiser_call, denoiser.family.title)
    extras = latents.noise_mask is not None or latents.concat is not None
    extras = extras or bool(positive.controls) or (negative is not None and bool(negative.controls))
    # Wan's image-to-video inputs (concat, a first-frame noise mask) work with k_euler: its loop checks them.
    wan = denoiser.family.denoiser_call == "wan"
    if settings.scheduler.startswith(K_PREFIX) and extras and not wan:
        raise ValueError(
            "ControlNet and inpainting run with the diffusers schedulers (dpmpp_2m, euler, ...); "
            f"{settings.scheduler} does not support them yet"
        )
    if denoiser.family.flow and latents.noise_mask is not None and not wan:
        raise ValueError(f"a latent noise mask (inpainting) is not supported for {family!r} models yet")
    if denoiser.family.flow and (positive.controls or (negative is not None and negative.controls)):
        raise ValueError(f"ControlNet is not supported for {family!r} models yet (SD 1.x and SDXL are)")
    if settings.step_cache.on and settings.cache != "easy" and not denoiser.family.flow:
        raise ValueError(
            f"cache {settings.cache!r}: the step caches run in the flow-matching DiT families' loops (Flux, "
            f"FLUX.2, SD3, Z-Image, Qwen-Image, Wan); {family!r} does not (use cache easy, or off)"
        )
    if settings.sigmas is not None and denoiser.family.denoiser_call not in SIGMA_LOOPS:
        raise ValueError(
            f"input 'sigmas': a hand-given schedule runs in the loops of {', '.join(SIGMA_LOOPS)} here, "
            f"not {denoiser.family.title}'s yet (disconnect it and set steps)"
        )
    if wan and settings.scheduler.startswith(K_PREFIX) and settings.scheduler != "k_euler":
        return sample_wan_k(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.denoiser_call == "wan":  # video latents: its own loop, its own scheduler checks
        return sample_wan(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.denoiser_call == "ltx2":  # video + sound latents: its own loop and checks
        return sample_ltx2(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.denoiser_call == "minimax":  # one packed sequence of text, sound and video rows
        if settings.scheduler.startswith(K_PREFIX) and settings.scheduler != "k_euler":
            from pipelines.diffusion.minimax_k_sampling import sample_minimax_k  # ComfyUI's samplers

            return sample_minimax_k(mm, denoiser, positive, latents, settings, on_step=on_step)
        from pipelines.diffusion.minimax_sampling import sample_minimax

        return sample_minimax(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.denoiser_call == "zimage" and settings.scheduler.startswith(K_PREFIX):
        if (
            settings.scheduler != "k_euler"
        ):  # ComfyUI's samplers over its flow sigmas (the templates' res_multistep)
            return sample_zimage_k(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if settings.scheduler.startswith(K_PREFIX):
        if denoiser.family.flow and settings.scheduler == "k_euler":
            # Flow models keep their flow-matching Euler loop (ComfyUI's euler on a flow model is Euler too).
            settings = replace(settings, scheduler="euler")
        else:
            if denoiser.family.denoiser_call == "krea2" and positive.references and positive.reference_method:
                raise ValueError(
                    f"sampler {settings.scheduler}: Krea 2's reference pictures run in its own loop (euler or "
                    "default), not the k-diffusion samplers"
                )
            if settings.step_cache.on and settings.cache != "easy":
                raise ValueError(
                    f"cache {settings.cache!r} works with the flow models' own loops (euler or default), "
                    f"not the k-diffusion sampler {settings.scheduler} (cache easy does)"
                )
            return sample_k(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
    if denoiser.family.flow:
        if denoiser.family.denoiser_call == "qwenimage":
            return sample_qwenimage(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "qwenimage21":
            return sample_qwenimage21(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "flux3":
            return sample_flux3(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "krea2":
            return sample_krea2(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "flux2":
            return sample_flux2(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "zimage":
            return sample_zimage(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        if denoiser.family.denoiser_call == "sd3":
            return sample_sd3(mm, denoiser, positive, negative, latents, settings, on_step=on_step)
        return sample_flux(mm, denoiser, positive, latents, settings, on_step=on_step)
    device = mm.device
    batch = latents.samples.shape[0]
    height, width = latents.pixel_size
    do_cfg = settings.cfg > 1.0 and negative is not None
    if denoiser.family.denoiser_subfolder == "unet" and denoiser.config.get("time_cond_proj_dim") is not None:
        do_cfg = False  # guidance-distilled UNets (LCM) take the scale as an embedding instead; not supported
    generator = torch.Generator("cpu").manual_seed(settings.seed)

    # 2. Prepare timesteps (denoise < 1 starts partway, as StableDiffusionImg2ImgPipeline.get_timesteps does)
    scheduler = make_scheduler(settings.scheduler, denoiser.scheduler_config)
    scheduler.set_timesteps(settings.steps, device=device)
    timesteps = scheduler.timesteps
    t_start = 0
    if settings.denoise < 1.0:
        init_timestep = min(int(settings.steps * settings.denoise), settings.steps)
        t_start = max(settings.steps - init_timestep, 0)
        timesteps = timesteps[t_start * scheduler.order :]
        if len(timesteps) == 0:
            return latents
    if hasattr(scheduler, "set_begin_index"):
        scheduler.set_begin_index(t_start * scheduler.order)

    # 3. Prepare latent variables: the noise comes from a CPU generator, so a seed gives the same image anywhere
    shape = tuple(latents.samples.shape)
    noise = randn_tensor(shape, generator=generator, device=torch.device(device), dtype=denoiser.dtype)
    if settings.denoise >= 1.0:
        x = noise * scheduler.init_noise_sigma
    else:
        init = latents.samples.to(device=device, dtype=denoiser.dtype)
        x = scheduler.add_noise(init, noise, timesteps[:1].repeat(batch))
    extra_step_kwargs = _extra_step_kwargs(scheduler, generator, settings.eta)
    concat = _inpaint_channels(denoiser, latents, do_cfg, device)
    keep = None
    if latents.noise_mask is not None:  # inpainting with an ordinary model: (mask, original latents)
        keep = (
            latents.noise_mask.to(device=device, dtype=denoiser.dtype),
            latents.samples.to(device, denoiser.dtype),
        )

    # 4. Prepare conditioning: negative first, then positive, as one doubled batch under CFG
    positive = batched_conditioning(positive, batch)
    cond, added_cond_kwargs = unet_conditioning(
        denoiser, positive, negative, do_cfg, batch, (height, width), device
    )

    controls = ActiveControls(
        mm, positive, negative, do_cfg=do_cfg, batch=batch, height=height, width=width, dtype=denoiser.dtype
    )

    # 5. Denoising loop (the ControlNets, if any, are held next to the denoiser for the whole loop)
    working = denoiser_working(denoiser, height, width, batch, do_cfg)
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        controls,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            model_input = torch.cat([x] * 2) if do_cfg else x
            model_input = scheduler.scale_model_input(model_input, t)

            residuals = (
                controls.residuals(model_input, t, cond.embeds, i, len(timesteps), added_cond_kwargs)
                if controls
                else None
            )
            if concat is not None:  # inpainting UNet: [latents, mask, masked-picture latents]
                model_input = torch.cat([model_input, concat], dim=1)
            with cache.branch("cfg" if do_cfg else "cond"):
                noise_pred = _predict_noise(
                    model, denoiser, model_input, t, cond, added_cond_kwargs, residuals
                )

            if do_cfg:
                noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
                noise_pred = noise_pred_uncond + settings.cfg * (noise_pred_text - noise_pred_uncond)

            stepped = scheduler.step(noise_pred, t, x, **extra_step_kwargs, return_dict=True)
            x = stepped.prev_sample
            if keep is not None:
                x = _keep_unmasked(scheduler, x, keep, noise, timesteps, i)

            if on_step is not None:
                on_step(
                    Step(
                        step=i + 1,
                        total=len(timesteps),
                        timestep=float(t),
                        latents=x,
                        denoised=predicted_original(scheduler, stepped),
                    )
                )

    return Latents(
        samples=x.cpu(),
        vae_scale_factor=latents.vae_scale_factor,
        source="sampled",
        noise_mask=latents.noise_mask,
    )
