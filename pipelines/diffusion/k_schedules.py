"""Sigma schedules for the k-diffusion samplers, by ComfyUI's scheduler names.

Lives here: `DiscreteSigmas`, `SIGMA_SCHEDULES`, `make_sigmas`, `ksampler_sigmas`, `advanced_sigmas`.
May import: stdlib, math, numpy, scipy, torch.

A DDPM-trained model (SD1.x/2.x, SDXL) knows 1000 noise levels: sigma_t = sqrt((1 - abar_t) / abar_t) for
the cumulative product abar of its betas (Karras et al. 2022, "Elucidating the design space", table 1, VP).
A schedule picks `steps` of them, high to low, then appends 0. The names and their definitions:

- normal: `steps` points evenly spaced in timestep from t(sigma_max) to t(sigma_min), each turned back
  into a sigma by log-linear interpolation between the two neighbouring trained levels (k-diffusion's
  `DiscreteSchedule.get_sigmas`);
- sgm_uniform: the same over `steps + 1` points with the last dropped (Stability's generative-models);
- karras: rho = 7 spacing of Karras et al. (2022), eq. 5;
- exponential: evenly spaced in log sigma;
- simple: every (1000 / steps)-th trained level, counting down from the top;
- ddim_uniform: the DDIM paper's "uniform" skip: every (1000 // steps)-th level from t = 1, reversed;
- beta: trained levels at the quantiles of a Beta(0.6, 0.6) distribution, rounded to whole timesteps,
  duplicates dropped (Lee et al. 2024, "Beta Sampling is All You Need").

Values are float32, as the samplers see them; the arithmetic is done the way ComfyUI does it so that the
same seed gives the same sigmas (and so the same picture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipelines.diffusion.schedulers import SIGMA_SCHEDULES


def _zero_terminal_snr(sigmas: torch.Tensor) -> torch.Tensor:
    """Lin et al. (2024) zero terminal SNR, as ComfyUI writes it (comfy/model_sampling.py
    `rescale_zero_terminal_snr_sigmas`): shift sqrt(alpha_bar) so the last level is 0 and rescale so the
    first keeps its value; the last alpha_bar is then set to 4.9e-8 (ComfyUI's), a finite top sigma."""
    alphas_bar_sqrt = (1 / (sigmas * sigmas + 1)).sqrt()
    first, last = alphas_bar_sqrt[0].clone(), alphas_bar_sqrt[-1].clone()
    alphas_bar_sqrt = (alphas_bar_sqrt - last) * (first / (first - last))
    alphas_bar = alphas_bar_sqrt**2
    alphas_bar[-1] = 4.8973451890853435e-08
    return ((1 - alphas_bar) / alphas_bar) ** 0.5


@dataclass(frozen=True)
class DiscreteSigmas:
    """The noise levels a DDPM-trained model was trained on, and the sigma <-> timestep maps."""

    sigmas: torch.Tensor  # (T,) float32, increasing with the timestep index

    @classmethod
    def from_scheduler_config(cls, config: dict[str, Any]) -> DiscreteSigmas:
        """From a diffusers `scheduler_config.json` (beta_schedule, beta_start, beta_end)."""
        steps = int(config.get("num_train_timesteps", 1000))
        start = float(config.get("beta_start", 0.00085))
        end = float(config.get("beta_end", 0.012))
        schedule = config.get("beta_schedule", "scaled_linear")
        if config.get("trained_betas") is not None:
            betas = torch.tensor(config["trained_betas"], dtype=torch.float64)
        elif schedule == "scaled_linear":  # the latent-diffusion schedule: linear in sqrt(beta)
            betas = torch.linspace(start**0.5, end**0.5, steps, dtype=torch.float64) ** 2
        elif schedule == "linear":
            betas = torch.linspace(start, end, steps, dtype=torch.float64)
        else:
            raise ValueError(f"beta_schedule {schedule!r} is not supported by the k-diffusion samplers")
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        sigmas = ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5
        if config.get("rescale_betas_zero_snr"):
            sigmas = _zero_terminal_snr(sigmas)
        return cls(sigmas=sigmas.float())

    @property
    def log_sigmas(self) -> torch.Tensor:
        return self.sigmas.log()

    @property
    def sigma_min(self) -> float:
        return float(self.sigmas[0])

    @property
    def sigma_max(self) -> float:
        return float(self.sigmas[-1])

    def timestep(self, sigma: torch.Tensor | float) -> torch.Tensor:
        """The nearest trained timestep in log sigma (the model is called with whole timesteps)."""
        log_sigma = torch.as_tensor(sigma, dtype=torch.float32).log()
        dists = log_sigma.reshape(-1) - self.log_sigmas[:, None]  # (T, N)
        return dists.abs().argmin(dim=0).float().reshape(torch.as_tensor(sigma).shape)

    def sigma(self, timestep: torch.Tensor | float) -> torch.Tensor:
        """Log-linear interpolation between the two neighbouring trained levels."""
        t = torch.as_tensor(timestep, dtype=torch.float32).clamp(0, len(self.sigmas) - 1)
        low, high = t.floor().long(), t.ceil().long()
        w = t.frac()
        log_sigmas = self.log_sigmas
        return ((1 - w) * log_sigmas[low] + w * log_sigmas[high]).exp()


def _append_zero(sigmas: list[float]) -> torch.Tensor:
    return torch.tensor([*sigmas, 0.0], dtype=torch.float32)


def _normal(ms: DiscreteSigmas, steps: int, *, sgm: bool) -> torch.Tensor:
    start = float(ms.timestep(ms.sigma_max))
    end = float(ms.timestep(ms.sigma_min))
    if sgm:
        timesteps = torch.linspace(start, end, steps + 1)[:-1]
    else:
        timesteps = torch.linspace(start, end, steps)
    return _append_zero([float(ms.sigma(t)) for t in timesteps])


def _karras(ms: DiscreteSigmas, steps: int, rho: float = 7.0) -> torch.Tensor:
    ramp = torch.linspace(0, 1, steps)
    min_inv_rho = ms.sigma_min ** (1 / rho)
    max_inv_rho = ms.sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros(1)])


def _exponential(ms: DiscreteSigmas, steps: int) -> torch.Tensor:
    sigmas = torch.linspace(math.log(ms.sigma_max), math.log(ms.sigma_min), steps).exp()
    return torch.cat([sigmas, sigmas.new_zeros(1)])


def _simple(ms: DiscreteSigmas, steps: int) -> torch.Tensor:
    stride = len(ms.sigmas) / steps
    return _append_zero([float(ms.sigmas[-(1 + int(i * stride))]) for i in range(steps)])


def _ddim_uniform(ms: DiscreteSigmas, steps: int) -> torch.Tensor:
    stride = max(len(ms.sigmas) // steps, 1)
    picked = [float(ms.sigmas[t]) for t in range(1, len(ms.sigmas), stride)]
    return torch.tensor([*reversed(picked), 0.0], dtype=torch.float32)


def _beta(ms: DiscreteSigmas, steps: int, alpha: float = 0.6, beta: float = 0.6) -> torch.Tensor:
    from scipy.stats import beta as beta_distribution  # scipy is only needed for this schedule

    last = len(ms.sigmas) - 1
    quantiles = 1 - np.linspace(0, 1, steps, endpoint=False)
    timesteps = np.rint(beta_distribution.ppf(quantiles, alpha, beta) * last)
    picked: list[float] = []
    previous = -1.0
    for t in timesteps:
        if t != previous:  # neighbouring quantiles can round to the same timestep
            picked.append(float(ms.sigmas[int(t)]))
        previous = t
    return _append_zero(picked)


def make_sigmas(schedule: str, ms: DiscreteSigmas, steps: int) -> torch.Tensor:
    """`steps + 1` sigmas (or fewer for `beta`), high to low, ending in 0."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if schedule == "normal":
        return _normal(ms, steps, sgm=False)
    if schedule == "sgm_uniform":
        return _normal(ms, steps, sgm=True)
    if schedule == "karras":
        return _karras(ms, steps)
    if schedule == "exponential":
        return _exponential(ms, steps)
    if schedule == "simple":
        return _simple(ms, steps)
    if schedule == "ddim_uniform":
        return _ddim_uniform(ms, steps)
    if schedule == "beta":
        return _beta(ms, steps)
    raise ValueError(f"unknown sigma schedule {schedule!r}; choose one of {', '.join(SIGMA_SCHEDULES)}")


def ksampler_sigmas(schedule: str, ms: DiscreteSigmas, steps: int, denoise: float) -> torch.Tensor:
    """KSampler's denoise: below 1, build the schedule for steps / denoise and keep its last steps + 1."""
    if denoise > 0.9999:
        return make_sigmas(schedule, ms, steps)
    if denoise <= 0.0:
        return torch.zeros(0)
    return make_sigmas(schedule, ms, int(steps / denoise))[-(steps + 1) :]


def advanced_sigmas(
    schedule: str,
    ms: DiscreteSigmas,
    steps: int,
    start_step: int,
    end_step: int,
    *,
    force_full_denoise: bool,
) -> torch.Tensor:
    """KSamplerAdvanced: run steps [start_step, end_step) of a `steps`-step schedule.

    Stopping early keeps the leftover noise unless `force_full_denoise` makes the last sigma 0.
    An empty result means there is nothing to do (the latent passes through).
    """
    sigmas = make_sigmas(schedule, ms, steps)
    if end_step < len(sigmas) - 1:
        sigmas = sigmas[: end_step + 1].clone()
        if force_full_denoise:
            sigmas[-1] = 0
    if start_step >= len(sigmas) - 1:
        return torch.zeros(0)
    return sigmas[start_step:]
