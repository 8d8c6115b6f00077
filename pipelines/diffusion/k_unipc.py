"""UniPC (Zhao et al. 2023, "UniPC: A Unified Predictor-Corrector Framework for Fast Sampling of Diffusion
Models", arXiv:2302.04867), the B(h) = h variant ("bh1"), data prediction, over a k-diffusion sigma grid.

Lives here: `uni_pc_bh1`. May import: stdlib, torch.

The solver runs in the variance-preserving frame: x_vp = x / sqrt(1 + sigma^2), alpha = 1 / sqrt(1 + sigma^2),
sigma_vp = sigma * alpha, lambda = log alpha - log sigma_vp. Each step is the UniP-p predictor (eq. 9 of the
paper, p = min(3, steps - 1), lowered on the final steps) and, on every step but the last, the UniC
corrector, which reuses the model call made at the predicted point (so the corrector costs no extra call).
As ComfyUI does, a schedule ending at sigma = 0 ends at sigma = 0.001 instead (lambda stays finite), and
the result is divided by that level's alpha.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
StepDone = Callable[[int, torch.Tensor], None]

_LAST_SIGMA = 0.001


def _alpha_sigma(sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    alpha = 1 / (sigma**2 + 1) ** 0.5
    return alpha, sigma * alpha


def _lambda(sigma: torch.Tensor) -> torch.Tensor:
    alpha, sigma_vp = _alpha_sigma(sigma)
    return torch.log(alpha) - torch.log(sigma_vp)


def _coefficients(
    hh: torch.Tensor, rks: torch.Tensor, order: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, b, h*phi_1): the Vandermonde system of the UniPC paper (eq. 8) for B(h) = h."""
    h_phi_1 = torch.expm1(hh)
    h_phi_k = h_phi_1 / hh - 1
    factorial = 1
    rows, b = [], []
    for i in range(1, order + 1):
        rows.append(torch.pow(rks, i - 1))
        b.append(h_phi_k * factorial / hh)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - 1 / factorial
    return torch.stack(rows), torch.stack(b), h_phi_1


def _update(
    x: torch.Tensor,
    model_prev: list[torch.Tensor],
    sigma_prev: list[torch.Tensor],
    sigma_t: torch.Tensor,
    order: int,
    denoise_vp: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One UniP step to sigma_t and, when `denoise_vp` is given, the UniC correction of it.

    Returns the new x and the model's estimate at the predicted point (None without the corrector).
    """
    m0, s0 = model_prev[-1], sigma_prev[-1]
    lambda_s0, lambda_t = _lambda(s0), _lambda(sigma_t)
    alpha_t, sigma_vp_t = _alpha_sigma(sigma_t)
    _, sigma_vp_s0 = _alpha_sigma(s0)
    h = lambda_t - lambda_s0

    rks, d1s = [], []
    for i in range(1, order):
        rk = (_lambda(sigma_prev[-(i + 1)]) - lambda_s0) / h
        rks.append(rk)
        d1s.append((model_prev[-(i + 1)] - m0) / rk)
    rks.append(torch.ones((), dtype=h.dtype))
    R, b, h_phi_1 = _coefficients(-h, torch.stack(rks), order)
    hh = -h  # B(h) = h in the data-prediction sign convention

    x_t_ = sigma_vp_t / sigma_vp_s0 * x - alpha_t * h_phi_1 * m0
    if d1s:
        differences = torch.stack(d1s, dim=1)  # (B, K, C, H, W)
        rhos_p = torch.tensor([0.5], dtype=x.dtype) if order == 2 else torch.linalg.solve(R[:-1, :-1], b[:-1])
        x_t = x_t_ - alpha_t * hh * torch.einsum("k,bk...->b...", rhos_p.to(x.dtype), differences)
    else:
        differences = None
        x_t = x_t_

    if denoise_vp is None:
        return x_t, None
    model_t = denoise_vp(x_t, sigma_t)
    rhos_c = torch.tensor([0.5], dtype=x.dtype) if order == 1 else torch.linalg.solve(R, b).to(x.dtype)
    correction = rhos_c[-1] * (model_t - m0)
    if differences is not None:
        correction = correction + torch.einsum("k,bk...->b...", rhos_c[:-1], differences)
    return x_t_ - alpha_t * hh * correction, model_t


def uni_pc_bh1(denoise: Denoise, x: torch.Tensor, sigmas: torch.Tensor, done: StepDone) -> torch.Tensor:
    """UniPC over `sigmas` (high to low); `x` and the result at noise level sigmas[0] / 0, VE frame."""
    sigmas = sigmas.clone()
    if sigmas[-1] == 0:
        sigmas[-1] = _LAST_SIGMA
    steps = len(sigmas) - 1
    order = max(1, min(3, steps - 1))

    def denoise_vp(x_vp: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return denoise(x_vp * (sigma**2 + 1) ** 0.5, sigma)  # the model sees the VE frame

    x = x / (sigmas[0] ** 2 + 1) ** 0.5
    model_prev = [denoise_vp(x, sigmas[0])]
    sigma_prev = [sigmas[0]]
    for step in range(1, steps + 1):
        step_order = min(order, step, steps + 1 - step)  # warm up, then lower the order at the end
        last = step == steps
        x, model_t = _update(
            x, model_prev, sigma_prev, sigmas[step], step_order, None if last else denoise_vp
        )
        if not last:
            model_prev = [*model_prev, model_t][-order:]
            sigma_prev = [*sigma_prev, sigmas[step]][-order:]
        done(step - 1, x * (sigmas[step] ** 2 + 1) ** 0.5)
    return x / _alpha_sigma(sigmas[-1])[0]
