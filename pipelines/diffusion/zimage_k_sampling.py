"""ComfyUI's KSampler samplers on Z-Image (res_multistep, uni_pc, dpmpp_2m, heun, ...): the k-diffusion loops
over ComfyUI's flow sigmas, so that the Z-Image templates' `res_multistep` / `simple` runs here as ComfyUI runs
it instead of as flow-matching Euler.

Lives here: `ZIMAGE_K_SAMPLERS`, `ZImageFlowDenoiser`, `sample_zimage_k`. May import: stdlib, torch, memory,
pipelines.steps, pipelines.diffusion.* (the samplers, the sigma schedules, the Z-Image loop's helpers).

What ComfyUI does with Z-Image (comfy/model_sampling.py `ModelSamplingDiscreteFlow` under
ModelSamplingAuraFlow, multiplier 1, and `CONST`; its Lumina-family model takes 1 - sigma and returns the
negated output), and so what this does, as `wan_k_sampling` does for Wan:
- the noise levels: sigma(t) = shift x t / (1 + (shift - 1) x t) for t = 1/1000 ... 1, the shift the folder's
  `shift` (or ModelSamplingAuraFlow's, which the importer writes there); the named schedule picks the steps;
- the start: x = sigma_0 x noise + (1 - sigma_0) x latent, the noise one CPU draw of the seed;
- the denoiser: the transformer at t = 1 - sigma predicts the negated velocity, so v = -out and the clean
  estimate is x - sigma x v; guidance is Z-Image's rule on the velocities, pos + g x (pos - neg) (ComfyUI's cfg
  g + 1, converted at import), skipped at g = 0.
The k-samplers themselves are the ones Wan runs (`k_samplers`, checked against ComfyUI's code).
"""

from __future__ import annotations

import torch

from memory import MemoryManager
from pipelines.diffusion.k_samplers import K_SAMPLERS, SeededNoise
from pipelines.diffusion.k_sampling import _sigmas_for
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.schedulers import FLOW_K_SAMPLERS, K_PREFIX
from pipelines.diffusion.sizes import config_patch_size
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.diffusion.wan_k_sampling import flow_sigmas, flow_start
from pipelines.diffusion.zimage_sampling import (
    CFG_NORMALIZATION,
    _captions,
    zimage_guidance,
    zimage_working,
)
from pipelines.steps import OnStep, Step

ZIMAGE_K_SAMPLERS = FLOW_K_SAMPLERS  # k_euler stays on the Z-Image loop's own flow-matching Euler
_TRAIN_STEPS = 1000


def _check(denoiser: DenoiserRef, latents: Latents, settings: SamplerSettings) -> str:
    name = settings.scheduler.removeprefix(K_PREFIX)
    title = denoiser.family.title
    if name not in ZIMAGE_K_SAMPLERS:
        raise ValueError(
            f"{title} runs the samplers {', '.join(ZIMAGE_K_SAMPLERS)} (and euler, default); {name!r} takes "
            "other steps on a flow-matching model in ComfyUI and is not written here"
        )
    if settings.step_cache.on:
        raise ValueError(
            f"cache {settings.cache!r} works with Z-Image's own loop (euler or default), not {name!r}"
        )
    if latents.samples.ndim != 4:
        raise ValueError(f"{title} denoises image latents (batch, channels, height, width)")
    patch = config_patch_size(denoiser.config)
    _, _, h, w = latents.samples.shape
    if h % patch or w % patch:
        raise ValueError(
            f"{title} cuts the latents into {patch}x{patch} patches: latent {w}x{h} is not a multiple of {patch}"
        )
    return name


class ZImageFlowDenoiser:
    """`(x, sigma) -> x0` for Z-Image: one call on the doubled batch under guidance (positives first), as the
    Z-Image loop makes it, at t = 1 - sigma; the velocity is the negated output."""

    def __init__(
        self,
        model: torch.nn.Module,
        ref: DenoiserRef,
        pos_caps: list[torch.Tensor],
        neg_caps: list[torch.Tensor],
        cfg: float,
        normalization: float = CFG_NORMALIZATION,
    ) -> None:
        self.model, self.ref, self.pos_caps, self.neg_caps = model, ref, pos_caps, neg_caps
        self.cfg, self.normalization = cfg, normalization

    def velocity(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        s = torch.as_tensor(sigma, dtype=torch.float32).reshape(()).to(x.device)
        timestep = (1.0 - s).expand(batch)
        model_input, captions = x.to(self.ref.dtype), self.pos_caps
        guided = bool(self.neg_caps)
        if guided:
            model_input, captions, timestep = (
                model_input.repeat(2, 1, 1, 1),
                self.pos_caps + self.neg_caps,
                timestep.repeat(2),
            )
        frames = list(model_input.unsqueeze(2).unbind(dim=0))  # B x (C, 1 frame, h, w)
        out = self.model(frames, timestep, captions, return_dict=False)[0]
        if guided:
            preds = [
                zimage_guidance(p.float(), n.float(), self.cfg, self.normalization)
                for p, n in zip(out[:batch], out[batch:], strict=True)
            ]
        else:
            preds = [o.float() for o in out]
        return -torch.stack(preds, dim=0).squeeze(2)  # the transformer predicts -velocity

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = torch.as_tensor(sigma, dtype=torch.float32).reshape(()).to(x.device)
        return x - s * self.velocity(x, sigma)


@torch.no_grad()
def sample_zimage_k(
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
    do_cfg = settings.cfg > 0.0 and negative is not None  # Z-Image's `guidance_scale > 0`

    # 2. Prepare sigmas: ComfyUI's flow levels at the folder's (or ModelSamplingAuraFlow's) shift
    config = denoiser.scheduler_config
    shift = float(config.get("shift", config.get("flow_shift", 1.0)))
    sigmas = _sigmas_for(settings, flow_sigmas(shift))
    if len(sigmas) < 2:
        return latents

    # 3. Prepare latent variables: ComfyUI's CONST noise scaling of one CPU draw
    x = flow_start(latents, settings, float(sigmas[0])).to(device)
    step_noise = SeededNoise(
        x, settings.seed
    )  # none of ZIMAGE_K_SAMPLERS draws from it; their signature takes one

    # 4. Prepare conditioning: positive captions first, then negative ones, as the Z-Image loop lists them
    dtype = denoiser.dtype
    pos_caps = _captions(positive, batch, device, dtype)
    neg_caps = _captions(negative, batch, device, dtype) if do_cfg and negative is not None else []

    # 5. Denoising loop: the sampler calls `denoise`, each step reports through `done`
    working = zimage_working(denoiser, latents, positive, negative, guidance=do_cfg)
    total = len(sigmas) - 1
    with use_denoiser(mm, denoiser, working=working) as model:
        denoise = ZImageFlowDenoiser(model, denoiser, pos_caps, neg_caps, settings.cfg)

        def done(i: int, x_now: torch.Tensor) -> None:
            if on_step is not None:
                on_step(Step(i + 1, total, timestep=float(sigmas[i]) * _TRAIN_STEPS, latents=x_now))

        x = K_SAMPLERS[name](denoise, x, sigmas.to(device), step_noise, done)

    last = float(sigmas[-1])
    x = x / (1.0 - last)  # ComfyUI's inverse noise scaling (a segment with leftover noise ends above 0)
    return Latents(samples=x.cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled")
