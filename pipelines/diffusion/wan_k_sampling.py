"""ComfyUI's KSampler samplers on Wan (uni_pc, dpmpp_2m, heun, ...): the k-diffusion loops over ComfyUI's flow
sigmas, so that a Wan template's `uni_pc` / `simple` sampler runs here as ComfyUI runs it.

Lives here: `WAN_K_SAMPLERS`, `flow_sigmas`, `flow_start`, `FlowDenoiser`, `sample_wan_k`. May import: stdlib, torch, memory, pipelines.steps,
pipelines.diffusion.* (the samplers, the sigma schedules, the Wan loop's input helpers).

What ComfyUI does with a flow-matching model (comfy/model_sampling.py, `ModelSamplingDiscreteFlow` and
`CONST`), and so what this does:
- the model's noise levels: sigma(t) = shift x t / (1 + (shift - 1) x t) for t = 1/1000 ... 1 (the shift is
  the folder's `flow_shift`, or ModelSamplingSD3's), from which the named schedule (simple, normal, ...)
  picks the steps, KSamplerAdvanced's segment included (`k_sampling`'s schedule code);
- the start: x = sigma_0 x noise + (1 - sigma_0) x latent (noise zero when a segment adds none), and the end
  divided by (1 - sigma_last) (1 when the schedule ends at 0: a segment with leftover noise hands that on);
- the denoiser: the transformer called at timestep 1000 x sigma predicts the velocity v, and the clean
  estimate is x - sigma x v; guidance mixes the estimates (the same as mixing velocities), no negative pass
  at cfg 1;
- the samplers are the k-diffusion ones ComfyUI runs unchanged on such models. Its ancestral, SDE and LCM
  samplers take other steps on flow models (`*_RF` variants), which are not written here: refused by name.
Wan 2.2 A14B folders switch experts where the timestep crosses `boundary_ratio` x 1000, each expert running
its stretch of the schedule as its own segment (a multistep sampler restarts there, as across ComfyUI's two
KSamplerAdvanced). Image to video (concat channels, CLIP image states) as in `wan_sampling`; a TI2V first
frame (a noise mask) is refused here: use euler.
"""

from __future__ import annotations

import math

import torch

from memory import MemoryManager
from pipelines.diffusion.k_samplers import K_SAMPLERS, SeededNoise
from pipelines.diffusion.k_sampling import _sigmas_for
from pipelines.diffusion.k_schedules import DiscreteSigmas
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.schedulers import FLOW_K_SAMPLERS, K_PREFIX
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.diffusion.wan_sampling import _image_inputs, _patch, wan_working
from pipelines.steps import OnStep, Step

# ComfyUI runs these unchanged on flow models (k_euler maps onto the Wan loop's own flow-matching Euler).
WAN_K_SAMPLERS = FLOW_K_SAMPLERS
_TRAIN_STEPS = 1000  # ModelSamplingDiscreteFlow's timesteps (its `multiplier`)


def flow_sigmas(shift: float) -> DiscreteSigmas:
    """ComfyUI's noise levels of a flow model at `shift`: time_snr_shift over t = 1/1000 ... 1."""
    t = torch.arange(1, _TRAIN_STEPS + 1, dtype=torch.float64) / _TRAIN_STEPS
    return DiscreteSigmas(sigmas=(shift * t / (1 + (shift - 1) * t)).float())


def flow_start(latents: Latents, settings: SamplerSettings, first_sigma: float) -> torch.Tensor:
    """ComfyUI's CONST noise scaling of one CPU draw of the seed: sigma_0 x noise + (1 - sigma_0) x latent (an
    empty latent counts as zeros; no noise when a segment adds none)."""
    shape = tuple(latents.samples.shape)
    noise = (
        torch.randn(shape, generator=torch.Generator("cpu").manual_seed(settings.seed))
        if settings.add_noise
        else torch.zeros(shape)
    )
    latent_in = latents.samples.float() if latents.source != "empty" else torch.zeros(shape)
    return first_sigma * noise + (1.0 - first_sigma) * latent_in


def _check(denoiser: DenoiserRef, latents: Latents, settings: SamplerSettings) -> str:
    name = settings.scheduler.removeprefix(K_PREFIX)
    title = denoiser.family.title
    if name not in WAN_K_SAMPLERS:
        raise ValueError(
            f"{title} runs the samplers {', '.join(WAN_K_SAMPLERS)} (and euler, default); {name!r} takes other "
            "steps on a flow-matching model in ComfyUI and is not written here"
        )
    if settings.step_cache.on:
        raise ValueError(
            f"cache {settings.cache!r} works with Wan's own loop (euler or default), not {name!r}"
        )
    if latents.noise_mask is not None:
        raise ValueError(
            f"{title}: a given first frame (Wan 2.2 TI2V image to video) runs with euler here, not {name!r}"
        )
    if settings.denoise < 1.0:
        raise ValueError(f"{title}: denoise below 1 (video-to-video) is not supported yet")
    if latents.samples.ndim != 5:
        raise ValueError(f"{title} denoises video latents: feed the sampler from an Empty Video Latent")
    return name


def _stages(denoiser: DenoiserRef, sigmas: torch.Tensor) -> list[tuple[DenoiserRef, torch.Tensor]]:
    """(expert, its stretch of sigmas) in run order: one for Wan 2.1; Wan 2.2's high-noise expert for the steps
    starting at timestep >= boundary, the low-noise one from there (the two stretches share that sigma)."""
    if denoiser.low_noise is None or denoiser.boundary_ratio is None:
        return [(denoiser, sigmas)]
    boundary = denoiser.boundary_ratio * _TRAIN_STEPS
    high = sum(1 for s in sigmas[:-1] if float(s) * _TRAIN_STEPS >= boundary)
    stages = [(denoiser, sigmas[: high + 1]), (denoiser.low_noise, sigmas[high:])]
    return [(ref, part) for ref, part in stages if len(part) > 1]


class FlowDenoiser:
    """`(x, sigma) -> x0`: one Wan expert called at timestep 1000 x sigma, its velocity turned into the clean
    estimate x - sigma x v, with guidance over two calls (conditional first) as the Wan loop makes them."""

    def __init__(
        self,
        model: torch.nn.Module,
        ref: DenoiserRef,
        cond: torch.Tensor,
        uncond: torch.Tensor | None,
        cfg: float,
        condition: torch.Tensor | None,
        image_embeds: torch.Tensor | None,
        tokens: int,
    ) -> None:
        self.model, self.ref, self.cond, self.uncond, self.cfg = model, ref, cond, uncond, cfg
        self.condition, self.image_embeds, self.tokens = condition, image_embeds, tokens

    def _velocity(self, x_in: torch.Tensor, t: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        return self.model(
            hidden_states=x_in,
            timestep=t,
            encoder_hidden_states=embeds,
            encoder_hidden_states_image=self.image_embeds,
            return_dict=False,
        )[0].float()

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = torch.as_tensor(sigma, dtype=torch.float32).reshape(()).to(x.device)
        x_in = x if self.condition is None else torch.cat([x, self.condition], dim=1)
        x_in = x_in.to(self.ref.dtype)
        batch = x.shape[0]
        t = s * _TRAIN_STEPS
        # TI2V (`expand_timesteps`) takes a timestep per video token: all the same here (no first frame).
        t = t.expand(batch, self.tokens) if self.ref.expand_timesteps else t.expand(batch)
        v = self._velocity(x_in, t, self.cond)
        if self.uncond is not None:
            v_uncond = self._velocity(x_in, t, self.uncond)
            v = v_uncond + self.cfg * (v - v_uncond)
        return x - s * v


@torch.no_grad()
def sample_wan_k(
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
    name = _check(denoiser, latents, settings)
    device = mm.device
    batch = latents.samples.shape[0]
    do_cfg = negative is not None and not math.isclose(settings.cfg, 1.0)

    # 2. Prepare sigmas: ComfyUI's flow levels at the model's shift, the named schedule (and segment)
    config = denoiser.scheduler_config
    shift = float(config.get("flow_shift", config.get("shift", 1.0)))
    sigmas = _sigmas_for(settings, flow_sigmas(shift))
    if len(sigmas) < 2:
        return latents  # an empty segment

    # 3. Prepare latent variables: ComfyUI's CONST noise scaling of one CPU draw
    shape = tuple(latents.samples.shape)
    x = flow_start(latents, settings, float(sigmas[0])).to(device)
    step_noise = SeededNoise(
        x, settings.seed
    )  # none of WAN_K_SAMPLERS draws from it; their signature takes one

    # 4. Prepare conditioning and the image-to-video inputs (as the Wan loop)
    dtype = denoiser.dtype
    cond = batched_conditioning(positive, batch).embeds.to(device=device, dtype=dtype)
    uncond = batched_conditioning(negative, batch).embeds.to(device, dtype) if do_cfg and negative else None
    condition, image_embeds = _image_inputs(mm, denoiser, latents, batch)
    _, ph, pw = _patch(denoiser)
    _, _, frames, h, w = shape
    tokens = frames * (h // ph) * (w // pw)

    # 5. Denoising loop, one expert at a time: the sampler calls `denoise`, each step reports through `done`
    working = wan_working(denoiser, shape)
    total, offset = len(sigmas) - 1, 0
    middle = frames // 2
    for expert, part in _stages(denoiser, sigmas.to(device)):
        with use_denoiser(mm, expert, working=working) as model:
            denoise = FlowDenoiser(model, expert, cond, uncond, settings.cfg, condition, image_embeds, tokens)

            def done(i: int, x_now: torch.Tensor, at: int = offset) -> None:
                if on_step is not None:
                    timestep = float(sigmas[at + i]) * _TRAIN_STEPS
                    on_step(Step(at + i + 1, total, timestep=timestep, latents=x_now[:, :, middle]))

            x = K_SAMPLERS[name](denoise, x, part, step_noise, done)
        offset += len(part) - 1

    last = float(sigmas[-1])
    x = x / (1.0 - last)  # ComfyUI's inverse noise scaling (a segment with leftover noise ends above 0)
    return Latents(
        samples=x.cpu(),
        vae_scale_factor=latents.vae_scale_factor,
        source="sampled",
        concat=latents.concat,
        clip_images=latents.clip_images,
    )
