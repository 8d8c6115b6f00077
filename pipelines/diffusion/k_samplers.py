"""The k-diffusion samplers: one function per ComfyUI `sampler_name`, each a loop over a sigma schedule.

Lives here: `Denoise`, `NoiseSampler`, `StepDone`, `SeededNoise`, `BrownianNoise`, `K_SAMPLERS`,
`K_SAMPLER_NAMES`, `gradient_estimate`. May import: stdlib, math, torch, torchsde.

Every sampler works on the Karras et al. (2022) ODE/SDE in "variance exploding" form: `x` has noise level
sigma, `denoise(x, sigma)` returns the model's estimate of the clean latent, and `d = (x - denoised) / sigma`
is the probability-flow derivative dx/dsigma. Written from the papers and from k-diffusion (MIT,
Katherine Crowson), whose `sample_*` functions are the parity reference in tests/test_k_sampling.py:

- euler: Karras et al. (2022) Algorithm 2 without churn (first-order Euler steps);
- euler_ancestral: Euler to sigma_down, then fresh noise of sigma_up (eta = 1, as DDPM ancestral steps);
- heun: Algorithm 2 (second order, Euler on the last step to sigma = 0);
- dpm_2: DPM-Solver-2 in sigma: a midpoint in log sigma (Lu et al. 2022);
- dpmpp_2m: DPM-Solver++(2M), multistep data prediction in lambda = -log sigma (Lu et al. 2022b);
- dpmpp_2m_sde: its SDE variant (eta = 1, midpoint correction), noise from a Brownian tree;
- dpmpp_sde: DPM-Solver++ SDE, a second-order single-step solver with r = 1/2, Brownian tree noise;
- ddim: DDIM with eta = 0, which in this parameterisation is exactly the Euler step (Karras et al. 2022,
  section 3; ComfyUI runs `ddim` as `euler`);
- lcm: multistep consistency sampling (Song et al. 2023, Algorithm 1; Luo et al. 2023): take the
  model's clean estimate, re-noise it to the next sigma;
- uni_pc: UniPC (Zhao et al. 2023), B(h) = h ("bh1"), predictor order up to 3 with the UniC corrector;
- dpm_2_ancestral / dpmpp_2s_ancestral: dpm_2 / DPM-Solver++(2S) to sigma_down, then noise of sigma_up;
- res_multistep (and _ancestral): the second-order exponential multistep "RES" solver (Zhang et al. 2023,
  arXiv 2308.02157), as ComfyUI's `res_multistep` writes it: phi functions over lambda, the previous
  estimate at the previous sigma_down;
- gradient_estimation: Euler plus (gamma - 1)(d - d_prev) dt (Permenter and Yuan 2024, "Interpreting and
  improving diffusion models from an optimization perspective"; gamma 2, ComfyUI's default), the last step
  to sigma 0 the clean estimate itself.

Noise: ancestral, res_multistep and LCM steps draw from a generator on the latent's device seeded with the
run's seed, seed + 1 on the CPU (ComfyUI's default noise sampler, `SeededNoise`); the SDE samplers draw Brownian increments from a `torchsde.BrownianTree` seeded the same way, so
a step's noise depends on its sigma interval, not on how many steps came before.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from pipelines.diffusion.schedulers import K_SAMPLER_NAMES

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, sigma) -> denoised x0
NoiseSampler = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (sigma, sigma_next) -> N(0, I)
StepDone = Callable[[int, torch.Tensor], None]  # (0-based step index, x after the step)


class SeededNoise:
    """ComfyUI's default noise sampler (comfy/k_diffusion/sampling.py, `default_noise_sampler`, v0.8.0):
    independent standard normal draws from a generator of its own on the latent's device, seeded with the
    run's seed, plus one on the CPU (ComfyUI adds 1 there so the draws differ from the initial noise, which
    is `torch.manual_seed(seed)` on the CPU). Same seed and device, same draws as ComfyUI's."""

    def __init__(self, x: torch.Tensor, seed: int) -> None:
        self._shape, self._dtype, self._device = x.shape, x.dtype, x.device
        device_seed = seed + 1 if x.device.type == "cpu" else seed
        self._generator = torch.Generator(device=x.device).manual_seed(device_seed)

    def __call__(self, sigma: torch.Tensor, sigma_next: torch.Tensor) -> torch.Tensor:
        return torch.randn(self._shape, dtype=self._dtype, device=self._device, generator=self._generator)


class BrownianNoise:
    """Normalised Brownian increments W(sigma_next) - W(sigma) / sqrt(|dsigma|) over [sigma_min, sigma_max]."""

    def __init__(self, x: torch.Tensor, sigma_min: float, sigma_max: float, seed: int) -> None:
        import torchsde  # only the SDE samplers need it

        # The tree lives on the CPU (as ComfyUI keeps it), so a seed gives the same noise on any device.
        t0, t1 = torch.as_tensor(sigma_min).cpu(), torch.as_tensor(sigma_max).cpu()
        self._device = x.device
        self._tree = torchsde.BrownianTree(t0, torch.zeros_like(x, device="cpu"), t1, entropy=seed)

    def __call__(self, sigma: torch.Tensor, sigma_next: torch.Tensor) -> torch.Tensor:
        sigma, sigma_next = torch.as_tensor(sigma).cpu(), torch.as_tensor(sigma_next).cpu()
        low, high = (sigma, sigma_next) if sigma < sigma_next else (sigma_next, sigma)
        sign = 1.0 if sigma < sigma_next else -1.0
        with warnings.catch_warnings():
            # float32 sigmas vs the tree's float endpoints differ in the last digit; the query is in range.
            warnings.filterwarnings("ignore", message="Should have t", category=UserWarning)
            increment = self._tree(low, high)
        return (increment * sign / (high - low).abs().sqrt()).to(self._device)


def _to_d(x: torch.Tensor, sigma: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """dx/dsigma of the probability-flow ODE."""
    return (x - denoised) / sigma


def _ancestral_step(sigma: torch.Tensor, sigma_next: torch.Tensor, eta: float = 1.0) -> tuple[float, float]:
    """(sigma_down, sigma_up): step deterministically to sigma_down, then add noise of sigma_up."""
    sigma, sigma_next = float(sigma), float(sigma_next)
    if not eta:
        return sigma_next, 0.0
    sigma_up = min(sigma_next, eta * (sigma_next**2 * (sigma**2 - sigma_next**2) / sigma**2) ** 0.5)
    return (sigma_next**2 - sigma_up**2) ** 0.5, sigma_up


def _lam(sigma: torch.Tensor) -> torch.Tensor:
    """lambda = -log sigma (half the log SNR in VE form): DPM-Solver's time variable."""
    return sigma.log().neg()


def euler(denoise: Denoise, x: torch.Tensor, sigmas: torch.Tensor, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        x = x + _to_d(x, sigmas[i], denoised) * (sigmas[i + 1] - sigmas[i])
        done(i, x)
    return x


def euler_ancestral(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        sigma_down, sigma_up = _ancestral_step(sigmas[i], sigmas[i + 1])
        x = x + _to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        if sigmas[i + 1] > 0:
            x = x + noise(sigmas[i], sigmas[i + 1]) * sigma_up
        done(i, x)
    return x


def heun(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        d = _to_d(x, sigmas[i], denoised)
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:  # no second evaluation at sigma = 0: plain Euler
            x = x + d * dt
        else:
            x_euler = x + d * dt
            d_next = _to_d(x_euler, sigmas[i + 1], denoise(x_euler, sigmas[i + 1]))
            x = x + (d + d_next) / 2 * dt
        done(i, x)
    return x


def dpm_2(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        d = _to_d(x, sigmas[i], denoised)
        if sigmas[i + 1] == 0:
            x = x + d * (sigmas[i + 1] - sigmas[i])
        else:
            sigma_mid = sigmas[i].log().lerp(sigmas[i + 1].log(), 0.5).exp()  # midpoint in log sigma
            x_mid = x + d * (sigma_mid - sigmas[i])
            d_mid = _to_d(x_mid, sigma_mid, denoise(x_mid, sigma_mid))
            x = x + d_mid * (sigmas[i + 1] - sigmas[i])
        done(i, x)
    return x


def dpmpp_2m(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        t, t_next = _lam(sigmas[i]), _lam(sigmas[i + 1])
        h = t_next - t
        if old_denoised is None or sigmas[i + 1] == 0:  # first step and the last: first order
            estimate = denoised
        else:
            r = (t - _lam(sigmas[i - 1])) / h
            estimate = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old_denoised
        x = (sigmas[i + 1] / sigmas[i]) * x - (-h).expm1() * estimate
        old_denoised = denoised
        done(i, x)
    return x


def dpmpp_2m_sde(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone, eta: float = 1.0):
    old_denoised, h_last = None, None
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        if sigmas[i + 1] == 0:
            x = denoised
            h = None
        else:
            t, s = _lam(sigmas[i]), _lam(sigmas[i + 1])
            h = s - t
            eta_h = eta * h
            x = sigmas[i + 1] / sigmas[i] * (-eta_h).exp() * x + (-h - eta_h).expm1().neg() * denoised
            if old_denoised is not None:  # second-order (midpoint) correction from the previous estimate
                r = h_last / h
                x = x + 0.5 * (-h - eta_h).expm1().neg() * (1 / r) * (denoised - old_denoised)
            if eta:
                scale = sigmas[i + 1] * (-2 * eta_h).expm1().neg().sqrt()
                x = x + noise(sigmas[i], sigmas[i + 1]) * scale
        old_denoised, h_last = denoised, h
        done(i, x)
    return x


def dpmpp_sde(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone, r: float = 0.5):
    def sigma_of(t: torch.Tensor) -> torch.Tensor:
        return t.neg().exp()

    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        if sigmas[i + 1] == 0:
            x = x + _to_d(x, sigmas[i], denoised) * (sigmas[i + 1] - sigmas[i])
        else:
            t, t_next = _lam(sigmas[i]), _lam(sigmas[i + 1])
            h = t_next - t
            s = t + h * r
            fac = 1 / (2 * r)
            # Step 1: to the intermediate time s, ancestral-style
            sd, su = _ancestral_step(sigma_of(t), sigma_of(s))
            s_ = _lam(torch.as_tensor(sd))
            x_2 = (sigma_of(s_) / sigma_of(t)) * x - (t - s_).expm1() * denoised
            x_2 = x_2 + noise(sigma_of(t), sigma_of(s)) * su
            denoised_2 = denoise(x_2, sigma_of(s))
            # Step 2: the full step with the blended estimate
            sd, su = _ancestral_step(sigma_of(t), sigma_of(t_next))
            t_next_ = _lam(torch.as_tensor(sd))
            estimate = (1 - fac) * denoised + fac * denoised_2
            x = (sigma_of(t_next_) / sigma_of(t)) * x - (t - t_next_).expm1() * estimate
            x = x + noise(sigma_of(t), sigma_of(t_next)) * su
        done(i, x)
    return x


def lcm(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        x = denoise(x, sigmas[i])
        if sigmas[i + 1] > 0:
            x = x + noise(sigmas[i], sigmas[i + 1]) * sigmas[i + 1]
        done(i, x)
    return x


def dpm_2_ancestral(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        down, sigma_up = _ancestral_step(sigmas[i], sigmas[i + 1])
        sigma_down = torch.as_tensor(down, dtype=sigmas.dtype)
        d = _to_d(x, sigmas[i], denoised)
        if down == 0:
            x = x + d * (sigma_down - sigmas[i])
        else:
            sigma_mid = sigmas[i].log().lerp(sigma_down.log(), 0.5).exp()  # midpoint in log sigma
            x_mid = x + d * (sigma_mid - sigmas[i])
            d_mid = _to_d(x_mid, sigma_mid, denoise(x_mid, sigma_mid))
            x = x + d_mid * (sigma_down - sigmas[i])
            x = x + noise(sigmas[i], sigmas[i + 1]) * sigma_up
        done(i, x)
    return x


def dpmpp_2s_ancestral(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        down, sigma_up = _ancestral_step(sigmas[i], sigmas[i + 1])
        if down == 0:
            x = x + _to_d(x, sigmas[i], denoised) * (down - sigmas[i])
        else:
            t, t_next = _lam(sigmas[i]), _lam(torch.as_tensor(down, dtype=sigmas.dtype))
            h = t_next - t
            s = t + h / 2  # r = 1/2: the intermediate time
            x_2 = ((-s).exp() / (-t).exp()) * x - (-h / 2).expm1() * denoised
            denoised_2 = denoise(x_2, (-s).exp())
            x = ((-t_next).exp() / (-t).exp()) * x - (-h).expm1() * denoised_2
        if sigmas[i + 1] > 0:
            x = x + noise(sigmas[i], sigmas[i + 1]) * sigma_up
        done(i, x)
    return x


def res_multistep(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone, eta: float = 0.0):
    old_denoised: torch.Tensor | None = None
    old_sigma_down: torch.Tensor | None = None
    for i in range(len(sigmas) - 1):
        denoised = denoise(x, sigmas[i])
        down, sigma_up = _ancestral_step(sigmas[i], sigmas[i + 1], eta)
        sigma_down = torch.as_tensor(down, dtype=sigmas.dtype)
        if down == 0 or old_denoised is None or old_sigma_down is None:  # first and last step: Euler
            x = x + _to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        else:
            t, t_old = _lam(sigmas[i]), _lam(old_sigma_down)
            t_next, t_prev = _lam(sigma_down), _lam(sigmas[i - 1])
            h = t_next - t
            c2 = (t_prev - t_old) / h
            phi1 = torch.expm1(-h) / -h
            phi2 = (phi1 - 1.0) / -h
            b1 = torch.nan_to_num(phi1 - phi2 / c2, nan=0.0)
            b2 = torch.nan_to_num(phi2 / c2, nan=0.0)
            x = (-h).exp() * x + h * (b1 * denoised + b2 * old_denoised)
        if sigmas[i + 1] > 0 and sigma_up:
            x = x + noise(sigmas[i], sigmas[i + 1]) * sigma_up
        old_denoised, old_sigma_down = denoised, sigma_down
        done(i, x)
    return x


def res_multistep_ancestral(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    return res_multistep(denoise, x, sigmas, noise, done, eta=1.0)


GE_GAMMA = 2.0  # ComfyUI's `sample_gradient_estimation` default


def gradient_estimate(d: torch.Tensor, old_d: torch.Tensor | None, sigma_next: torch.Tensor) -> torch.Tensor:
    """The derivative a gradient-estimation step moves along: d, plus (gamma - 1)(d - d_prev) after the first
    step (none on a last step to sigma 0, which lands on the clean estimate: Euler's landing there too)."""
    if old_d is None or float(sigma_next) == 0.0:
        return d
    return d + (GE_GAMMA - 1.0) * (d - old_d)


def gradient_estimation(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    old_d: torch.Tensor | None = None
    for i in range(len(sigmas) - 1):
        d = _to_d(x, sigmas[i], denoise(x, sigmas[i]))
        x = x + gradient_estimate(d, old_d, sigmas[i + 1]) * (sigmas[i + 1] - sigmas[i])
        old_d = d
        done(i, x)
    return x


# Samplers whose noise is a Brownian tree over the schedule (the others get SeededNoise).
BROWNIAN = frozenset({"dpmpp_2m_sde", "dpmpp_sde"})


def _uni_pc(denoise: Denoise, x, sigmas, noise: NoiseSampler, done: StepDone):
    from pipelines.diffusion.k_unipc import uni_pc_bh1

    return uni_pc_bh1(denoise, x, sigmas, done)


K_SAMPLERS: dict[str, Callable[..., torch.Tensor]] = {
    "euler": euler,
    "euler_ancestral": euler_ancestral,
    "heun": heun,
    "dpm_2": dpm_2,
    "dpmpp_2m": dpmpp_2m,
    "dpmpp_2m_sde": dpmpp_2m_sde,
    "dpmpp_sde": dpmpp_sde,
    "ddim": euler,
    "uni_pc": _uni_pc,
    "lcm": lcm,
    "dpm_2_ancestral": dpm_2_ancestral,
    "dpmpp_2s_ancestral": dpmpp_2s_ancestral,
    "res_multistep": res_multistep,
    "res_multistep_ancestral": res_multistep_ancestral,
    "gradient_estimation": gradient_estimation,
}
assert tuple(K_SAMPLERS) == K_SAMPLER_NAMES, "one list of names: pipelines.diffusion.schedulers"
