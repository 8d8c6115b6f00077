"""ComfyUI's `gradient_estimation` sampler (the LTX-2 image-to-video templates' KSamplerSelect).

Ours (`k_samplers.gradient_estimation`) against the loop of ComfyUI's `sample_gradient_estimation`
(comfy/k_diffusion/sampling.py, ge_gamma 2, transcribed below as the reference) over the same toy denoiser and
sigmas; and with no previous step to correct from (one step) it is Euler.
"""

from __future__ import annotations

import torch

from pipelines.diffusion.k_samplers import K_SAMPLERS, SeededNoise


def _denoise(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    return x / (1 + sigma**2) + 0.1 * torch.sin(x)  # a smooth toy x0 estimate that depends on sigma


def _comfy_gradient_estimation(model, x, sigmas, ge_gamma: float = 2.0) -> torch.Tensor:
    """ComfyUI's loop: Euler, plus (gamma - 1)(d - old_d) dt after the first step; to sigma 0 the estimate."""
    old_d = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i])
        d = (x - denoised) / sigmas[i]
        dt = sigmas[i + 1] - sigmas[i]
        if sigmas[i + 1] == 0:
            x = denoised
        else:
            x = x + d * dt
            if i >= 1:
                x = x + (ge_gamma - 1) * (d - old_d) * dt
        old_d = d
    return x


def test_matches_comfyuis_loop() -> None:
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0)) * 10
    sigmas = torch.tensor([10.0, 5.0, 2.0, 0.8, 0.3, 0.0])
    steps: list[int] = []
    ours = K_SAMPLERS["gradient_estimation"](
        _denoise, x, sigmas, SeededNoise(x, 0), lambda i, _x: steps.append(i)
    )
    reference = _comfy_gradient_estimation(_denoise, x, sigmas)
    assert steps == [0, 1, 2, 3, 4]
    # The same float32 ops; only the last step differs in form (Euler to 0 against the estimate itself).
    assert torch.allclose(ours, reference, atol=1e-5)
    euler = K_SAMPLERS["euler"](_denoise, x, sigmas, SeededNoise(x, 0), lambda i, _x: None)
    assert not torch.allclose(ours, euler, atol=1e-3)  # the correction does something


def test_one_step_is_euler() -> None:
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    sigmas = torch.tensor([1.0, 0.5])
    ge = K_SAMPLERS["gradient_estimation"](_denoise, x, sigmas, SeededNoise(x, 0), lambda i, _x: None)
    euler = K_SAMPLERS["euler"](_denoise, x, sigmas, SeededNoise(x, 0), lambda i, _x: None)
    assert torch.equal(ge, euler)
