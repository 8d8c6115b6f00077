"""ComfyUI's KSampler on our models: k-diffusion samplers over ComfyUI's sigma schedules, its noise, its
CFG and its denoise semantics, so that a ComfyUI workflow gives the same picture for the same seed.

Lives here: `K_PREFIX`, `K_SCHEDULER_NAMES`, `KDenoiser`, `initial_latent`, `sample_k`.
May import: stdlib, torch, memory, pipelines.diffusion.*.

A Sampler node offers these as `k_<sampler_name>` next to the diffusers schedulers, plus a `sigma_schedule`
(ComfyUI's `scheduler`). What ComfyUI does, and so what we do:
- noise: one `torch.randn` of the whole latent batch from a CPU generator seeded with the seed;
- start: latent + noise * sqrt(1 + sigma_0^2) when the schedule starts at the model's top level (full
  denoise), latent + noise * sigma_0 otherwise (partial denoise, KSamplerAdvanced's later segments);
- denoise < 1: the schedule for steps / denoise steps, keeping its last steps + 1 sigmas;
- CFG: uncond + cfg * (cond - uncond) on the denoised estimates; at cfg == 1 the negative is not run;
- the ancestral/LCM samplers draw their extra noise from a second CPU generator seeded with the same seed,
  the SDE samplers from a Brownian tree with that seed.
Only DDPM-trained (UNet) families run here; flow-matching models keep their own loop.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from memory import MemoryManager
from pipelines.diffusion.k_samplers import BROWNIAN, K_SAMPLERS, BrownianNoise, SeededNoise
from pipelines.diffusion.k_schedules import (
    DiscreteSigmas,
    advanced_sigmas,
    ksampler_sigmas,
)
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import (
    SamplerSettings,
    _predict_noise,
    batched_conditioning,
    denoiser_working,
    unet_conditioning,
)
from pipelines.diffusion.schedulers import K_PREFIX, K_SCHEDULER_NAMES, SIGMA_SCHEDULES
from pipelines.diffusion.step_cache import CacheSession, step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep, Step

__all__ = ["K_SCHEDULER_NAMES", "SIGMA_SCHEDULES", "KDenoiser", "initial_latent", "sample_k"]


class KDenoiser:
    """`(x, sigma) -> denoised`: scales the input, calls the network at the nearest trained timestep and
    turns its epsilon (or v) prediction into a clean-latent estimate, with CFG over a doubled batch."""

    def __init__(
        self,
        model: torch.nn.Module,
        ref: DenoiserRef,
        model_sigmas: DiscreteSigmas,
        cond: Conditioning,
        added_cond_kwargs: dict[str, Any] | None,
        cfg: float,
        do_cfg: bool,
        cache: CacheSession | None = None,
        sigmas: torch.Tensor | None = None,
    ) -> None:
        self.model, self.ref, self.model_sigmas = model, ref, model_sigmas
        self.cond, self.added_cond_kwargs = cond, added_cond_kwargs
        self.cfg, self.do_cfg = cfg, do_cfg
        # The easy cache counts steps: a call's step is the nearest sigma of the run's schedule (a second
        # evaluation of heun or dpm_2 lands on the next step's sigma).
        self.cache, self.sigmas = cache, sigmas
        self.v_prediction = ref.scheduler_config.get("prediction_type", "epsilon") == "v_prediction"

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        sigma = torch.as_tensor(sigma, dtype=torch.float32).reshape(())
        t = self.model_sigmas.timestep(sigma).to(x.device)
        scale = (sigma**2 + 1) ** -0.5  # c_in: unit variance at the network's input
        model_input = (x * scale.to(x.device)).to(self.ref.dtype)  # the sampler itself stays float32
        if self.do_cfg:
            model_input = torch.cat([model_input] * 2)  # negative first, then positive
        if self.cache is not None and self.sigmas is not None:
            self.cache.step(int(torch.argmin((self.sigmas.cpu() - sigma).abs())))
        with self.cache.branch("cfg" if self.do_cfg else "cond") if self.cache is not None else nullcontext():
            out = _predict_noise(self.model, self.ref, model_input, t, self.cond, self.added_cond_kwargs)
        out = out.float()
        xs = torch.cat([x] * 2) if self.do_cfg else x
        s = sigma.to(x.device)
        if self.v_prediction:
            denoised = xs * scale**2 - out * s * scale
        else:
            denoised = xs - out * s
        if self.do_cfg:
            uncond, cond = denoised.chunk(2)
            denoised = uncond + self.cfg * (cond - uncond)
        return denoised


def initial_latent(
    latent: torch.Tensor, noise: torch.Tensor, sigmas: torch.Tensor, model_sigmas: DiscreteSigmas
) -> torch.Tensor:
    """Noise the input latent to sigmas[0]; at the model's top level as a variance-preserving draw."""
    sigma = float(sigmas[0])
    full = math.isclose(model_sigmas.sigma_max, sigma, rel_tol=1e-5) or sigma > model_sigmas.sigma_max
    return latent + noise * (math.sqrt(1.0 + sigma**2) if full else sigma)


def _sigmas_for(settings: SamplerSettings, model_sigmas: DiscreteSigmas) -> torch.Tensor:
    if settings.start_step > 0 or settings.end_step < settings.steps:
        return advanced_sigmas(
            settings.sigma_schedule,
            model_sigmas,
            settings.steps,
            settings.start_step,
            settings.end_step,
            force_full_denoise=settings.force_full_denoise,
        )
    return ksampler_sigmas(settings.sigma_schedule, model_sigmas, settings.steps, settings.denoise)


@torch.no_grad()
def sample_k(
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
    if denoiser.family.flow:
        raise ValueError(
            f"{settings.scheduler} runs DDPM-trained models; {denoiser.family.title} is a flow-matching "
            "model: use the scheduler 'euler' or 'default'"
        )
    name = settings.scheduler.removeprefix(K_PREFIX)
    if name not in K_SAMPLERS:
        raise ValueError(f"unknown k-diffusion sampler {settings.scheduler!r}")
    device = mm.device
    batch = latents.samples.shape[0]
    height, width = latents.pixel_size
    do_cfg = negative is not None and not math.isclose(settings.cfg, 1.0)

    # 2. Prepare sigmas
    model_sigmas = DiscreteSigmas.from_scheduler_config(denoiser.scheduler_config)
    sigmas = _sigmas_for(settings, model_sigmas)
    if len(sigmas) < 2:
        return latents  # nothing to run (denoise 0, or a start step past the end)

    # 3. Prepare latent variables: ComfyUI's noise is one CPU draw of the whole batch
    shape = tuple(latents.samples.shape)
    if settings.add_noise:
        noise = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(settings.seed))
    else:
        noise = torch.zeros(shape)
    latent_in = latents.samples.float() if latents.source != "empty" else torch.zeros(shape)
    x = initial_latent(latent_in, noise, sigmas, model_sigmas).to(device)
    positive_sigmas = sigmas[sigmas > 0]
    if name in BROWNIAN:
        step_noise = BrownianNoise(x, float(positive_sigmas.min()), float(sigmas.max()), settings.seed)
    else:
        step_noise = SeededNoise(x, settings.seed)

    # 4. Prepare conditioning: negative first, then positive, as one doubled batch under CFG
    positive = batched_conditioning(positive, batch)
    cond, added_cond_kwargs = unet_conditioning(
        denoiser, positive, negative, do_cfg, batch, (height, width), device
    )

    # 5. Denoising loop: the sampler calls the model; each finished step reports through `done`
    working = denoiser_working(denoiser, height, width, batch, do_cfg)
    total = len(sigmas) - 1

    def done(i: int, x_now: torch.Tensor) -> None:
        if on_step is not None:
            on_step(Step(i + 1, total, timestep=float(model_sigmas.timestep(sigmas[i])), latents=x_now))

    with (
        use_denoiser(mm, denoiser, working=working) as model,  # with the ref's LoRA patches
        step_cache(model, settings.step_cache, total) as cache,
    ):
        k_denoise = KDenoiser(
            model, denoiser, model_sigmas, cond, added_cond_kwargs, settings.cfg, do_cfg, cache, sigmas
        )
        x = K_SAMPLERS[name](k_denoise, x, sigmas.to(device), step_noise, done)

    return Latents(samples=x.cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled")
