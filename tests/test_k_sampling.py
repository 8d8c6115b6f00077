"""The k-diffusion samplers against reference implementations, on a tiny UNet.

For every ComfyUI sampler x scheduler pair: our sampler over our schedule equals the `k-diffusion` package's
`sample_*` (the reference implementation of the algorithms) over the same denoiser and sigmas, to a few
float32 roundings of the largest value per step (`_close`).
Samplers k-diffusion does not have are checked against another reference: ddim against the DDIM update
written from its definition, lcm against multistep consistency sampling (Song et al. 2023, Alg. 1), uni_pc
against diffusers' UniPCMultistepScheduler (bh1, data prediction) stepped over the same sigmas.
The schedules k-diffusion has (normal = DiscreteSchedule.get_sigmas, karras, exponential) are compared to
it; the others are checked for the levels their definitions pick.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
from diffusers import UNet2DConditionModel, UniPCMultistepScheduler

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.k_samplers import K_SAMPLERS, BrownianNoise, SeededNoise
from pipelines.diffusion.k_sampling import KDenoiser, initial_latent
from pipelines.diffusion.k_schedules import SIGMA_SCHEDULES, DiscreteSigmas, ksampler_sigmas, make_sigmas
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents

SD_SCHEDULER = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
SEED = 1234
STEPS = 5


def _k_diffusion():
    """k_diffusion.sampling and .external without the package __init__ (it imports torchvision, wandb...)."""
    if "k_diffusion.sampling" in sys.modules:
        return sys.modules["k_diffusion.sampling"], sys.modules["k_diffusion.external"]
    found = importlib.util.find_spec("k_diffusion")
    if found is None:
        pytest.fail("the k-diffusion package is a dev dependency: pip install -e '.[dev]'")
    folder = Path(found.submodule_search_locations[0])
    package = types.ModuleType("k_diffusion")
    package.__path__ = [str(folder)]
    utils = types.ModuleType("k_diffusion.utils")
    utils.append_dims = lambda x, n: x[(...,) + (None,) * (n - x.ndim)]
    sys.modules.update({"k_diffusion": package, "k_diffusion.utils": utils})
    loaded = []
    for name in ("sampling", "external"):
        spec = importlib.util.spec_from_file_location(f"k_diffusion.{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        setattr(package, name, module)
        loaded.append(module)
    return tuple(loaded)


@pytest.fixture(scope="module")
def kd():
    return _k_diffusion()


@pytest.fixture(scope="module")
def setup():
    """A tiny SD-shaped UNet wrapped as a CFG denoiser, the model's sigmas and a starting latent."""
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=2,
        norm_num_groups=4,
    ).eval()
    ref = DenoiserRef(
        handle=None,
        family=FAMILIES["sd"],
        config=dict(unet.config),
        scheduler_config=SD_SCHEDULER,
        dtype=torch.float32,
    )
    ms = DiscreteSigmas.from_scheduler_config(SD_SCHEDULER)
    embeds = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    cond = Conditioning(embeds=embeds, family="sd")
    denoise = KDenoiser(unet, ref, ms, cond, None, cfg=3.0, do_cfg=True)
    noise = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(SEED))
    return torch.no_grad()(denoise), ms, noise


def _close(ours: torch.Tensor, reference: torch.Tensor, steps: int = STEPS) -> None:
    """Equal up to float32 rounding. Both sides do the same arithmetic in a different order (k-diffusion
    writes `x + d * (sigma_next - sigma)`, the SDE steps through `expm1` or `exp` differently), so each step
    may round differently by about an ulp of the largest value in play; |x| reaches ~75 here (noise times
    sigma_max 14.6, and the SDE noise on top), where one ulp is 7.6e-6. The UNet mixes every element, so a
    value near 0 inherits the large values' rounding: the bound is absolute, from the largest magnitude,
    not relative per element. 16 roundings per step allowed over `steps` steps (~7e-4 at |x| 75); seen:
    up to 3.1e-5 here (Intel, AVX-512) and 1.9e-5 on an AMD EPYC (AVX2), where 1e-5 flat failed, and
    1.34e-4 at |x| ~27 for dpm_2_ancestral/normal on this machine on 2026-12-03 (4 roundings per step allowed
    1.30e-4 there). A wrong coefficient or a skipped step moves the result by 1e-2 and more, over 15x this
    bound."""
    scale = max(float(reference.abs().max()), 1.0)
    atol = 16 * steps * torch.finfo(torch.float32).eps * scale
    torch.testing.assert_close(ours, reference, atol=atol, rtol=0)


def _ignore(i: int, x: torch.Tensor) -> None:
    pass


KD_SAMPLERS = (
    "euler",
    "euler_ancestral",
    "heun",
    "dpm_2",
    "dpmpp_2m",
    "dpmpp_2m_sde",
    "dpmpp_sde",
    # Added later: two model calls a step, about a second each here, so in the slow lane.
    pytest.param("dpm_2_ancestral", marks=pytest.mark.slow),
    pytest.param("dpmpp_2s_ancestral", marks=pytest.mark.slow),
)


@pytest.mark.parametrize("schedule", SIGMA_SCHEDULES)
@pytest.mark.parametrize("name", KD_SAMPLERS)
def test_sampler_equals_k_diffusion(kd, setup, name: str, schedule: str) -> None:
    sampling, _ = kd
    denoise, ms, noise = setup
    sigmas = make_sigmas(schedule, ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    smin, smax = float(sigmas[sigmas > 0].min()), float(sigmas.max())
    if name in ("dpmpp_2m_sde", "dpmpp_sde"):
        ours_noise = BrownianNoise(x, smin, smax, SEED)
        ref_noise = sampling.BrownianTreeNoiseSampler(x, smin, smax, seed=SEED)
    else:
        ours_noise, ref_noise = SeededNoise(x, SEED), SeededNoise(x, SEED)
    steps: list[int] = []
    ours = K_SAMPLERS[name](denoise, x, sigmas, ours_noise, lambda i, _x: steps.append(i))
    kwargs = {"noise_sampler": ref_noise} if name not in ("euler", "heun", "dpm_2", "dpmpp_2m") else {}

    def model(x_in: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return denoise(x_in, sigma[0])  # k-diffusion passes sigma as a batch vector

    reference = getattr(sampling, f"sample_{name}")(model, x, sigmas, disable=True, **kwargs)
    assert steps == list(range(len(sigmas) - 1))
    assert torch.isfinite(ours).all()
    _close(ours, reference)


@pytest.mark.parametrize("schedule", SIGMA_SCHEDULES)
def test_ddim_is_the_ddim_update(setup, schedule: str) -> None:
    denoise, ms, noise = setup
    sigmas = make_sigmas(schedule, ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    expected = x
    for i in range(len(sigmas) - 1):
        # DDIM (eta 0): predict x0 and eps, then re-form the sample at the next noise level.
        x0 = denoise(expected, sigmas[i])
        eps = (expected - x0) / sigmas[i]
        expected = x0 + sigmas[i + 1] * eps
    ours = K_SAMPLERS["ddim"](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)
    _close(ours, expected)


@pytest.mark.parametrize("schedule", SIGMA_SCHEDULES)
def test_lcm_is_multistep_consistency_sampling(setup, schedule: str) -> None:
    denoise, ms, noise = setup
    sigmas = make_sigmas(schedule, ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    # ComfyUI's default noise sampler on the CPU: seed + 1 (see _comfy_default_noise_sampler below).
    generator = torch.Generator().manual_seed(SEED + 1)
    expected = x
    for i in range(len(sigmas) - 1):
        expected = denoise(expected, sigmas[i])  # the consistency function's clean estimate
        if sigmas[i + 1] > 0:
            expected = expected + sigmas[i + 1] * torch.randn(x.shape, generator=generator)
    ours = K_SAMPLERS["lcm"](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)
    _close(ours, expected)


@pytest.mark.parametrize("schedule", SIGMA_SCHEDULES)
def test_uni_pc_equals_diffusers_unipc(setup, schedule: str) -> None:
    denoise, ms, noise = setup
    sigmas = make_sigmas(schedule, ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    ours = K_SAMPLERS["uni_pc"](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)

    # diffusers' UniPC in the VP frame over the same sigmas (the last one 0.001, as ComfyUI's uni_pc).
    scheduler = UniPCMultistepScheduler(
        **SD_SCHEDULER, solver_order=3, solver_type="bh1", prediction_type="sample", lower_order_final=True
    )
    scheduler.set_timesteps(len(sigmas) - 1)
    grid = sigmas.clone()
    grid[-1] = 0.001
    scheduler.sigmas = grid
    scheduler.timesteps = torch.arange(len(sigmas) - 1, 0, -1)
    sample_vp = x / (grid[0] ** 2 + 1) ** 0.5
    for i, t in enumerate(scheduler.timesteps):
        scale = (grid[i] ** 2 + 1) ** 0.5
        x0 = denoise(sample_vp * scale, grid[i])
        sample_vp = scheduler.step(x0, t, sample_vp, return_dict=False)[0]
    expected = sample_vp * (grid[-1] ** 2 + 1) ** 0.5
    _close(ours, expected)


def test_schedules_equal_k_diffusion_where_it_has_them(kd) -> None:
    sampling, external = kd
    ms = DiscreteSigmas.from_scheduler_config(SD_SCHEDULER)
    discrete = external.DiscreteSchedule(ms.sigmas, quantize=True)
    torch.testing.assert_close(make_sigmas("normal", ms, 12), discrete.get_sigmas(12))
    torch.testing.assert_close(
        make_sigmas("karras", ms, 12), sampling.get_sigmas_karras(12, ms.sigma_min, ms.sigma_max)
    )
    torch.testing.assert_close(
        make_sigmas("exponential", ms, 12), sampling.get_sigmas_exponential(12, ms.sigma_min, ms.sigma_max)
    )
    # The model's levels: SD's scaled-linear betas give sigma_max 14.6146 and sigma_min 0.0292.
    assert ms.sigma_max == pytest.approx(14.6146, abs=1e-4)
    assert ms.sigma_min == pytest.approx(0.0292, abs=1e-4)


def test_schedules_pick_the_levels_their_definitions_name() -> None:
    ms = DiscreteSigmas.from_scheduler_config(SD_SCHEDULER)
    level = ms.sigmas
    # simple: every 100th level from the top; ddim_uniform: t = 1, 101, ..., 901, high to low.
    assert make_sigmas("simple", ms, 10)[:-1].tolist() == level[[999 - 100 * i for i in range(10)]].tolist()
    assert (
        make_sigmas("ddim_uniform", ms, 10)[:-1].tolist()
        == level[[901 - 100 * i for i in range(10)]].tolist()
    )
    # sgm_uniform: steps + 1 evenly spaced timesteps from 999 to 0, the last dropped.
    sgm = make_sigmas("sgm_uniform", ms, 4)
    assert sgm[:-1].tolist() == pytest.approx([float(ms.sigma(t)) for t in (999, 749.25, 499.5, 249.75)])
    # beta: the Beta(0.6, 0.6) quantiles start at the top level, fall monotonically, end in 0.
    beta = make_sigmas("beta", ms, 10)
    assert float(beta[0]) == float(level[-1]) and float(beta[-1]) == 0.0
    assert (beta[1:] < beta[:-1]).all() and len(beta) <= 11
    for schedule in SIGMA_SCHEDULES:
        sigmas = make_sigmas(schedule, ms, 7)
        assert sigmas.dtype == torch.float32 and float(sigmas[-1]) == 0.0


def test_partial_denoise_keeps_the_tail_of_a_longer_schedule() -> None:
    ms = DiscreteSigmas.from_scheduler_config(SD_SCHEDULER)
    full = make_sigmas("karras", ms, 20)
    torch.testing.assert_close(ksampler_sigmas("karras", ms, 10, 0.5), full[-11:])
    torch.testing.assert_close(ksampler_sigmas("karras", ms, 10, 1.0), make_sigmas("karras", ms, 10))


def _comfy_default_noise_sampler(x: torch.Tensor, seed: int):
    """ComfyUI v0.8.0 comfy/k_diffusion/sampling.py `default_noise_sampler`, re-written here as the
    reference: a generator on x's device seeded with the seed (seed + 1 when x is on the CPU), one
    `torch.randn(x.size(), dtype, layout, device, generator)` per call. The seed is the KSampler's
    (comfy/samplers.py `CFGGuider.inner_sample` puts it in `extra_args["seed"]`)."""
    if x.device == torch.device("cpu"):
        seed += 1
    generator = torch.Generator(device=x.device)
    generator.manual_seed(seed)
    return lambda sigma, sigma_next: torch.randn(
        x.size(), dtype=x.dtype, layout=x.layout, device=x.device, generator=generator
    )


def test_seeded_noise_draws_comfyuis_default_noise_sequence() -> None:
    x = torch.zeros(2, 4, 3, 3)
    draws, reference = SeededNoise(x, 7), _comfy_default_noise_sampler(x, 7)
    for _ in range(3):
        one, two = torch.tensor(1.0), torch.tensor(0.5)
        torch.testing.assert_close(draws(one, two), reference(one, two), atol=0, rtol=0)
    # Not the initial noise's stream: ComfyUI's latent noise is torch.manual_seed(seed) on the CPU.
    assert not torch.equal(
        SeededNoise(x, 7)(one, two), torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    )


def _comfy_sample_euler_ancestral(model, x, sigmas, seed: int) -> torch.Tensor:
    """ComfyUI v0.8.0 comfy/k_diffusion/sampling.py `sample_euler_ancestral` (eta 1, s_noise 1, the
    default noise sampler from the seed), re-written here step for step as the reference."""
    noise_sampler = _comfy_default_noise_sampler(x, seed)
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i])
        sigma_up = min(
            sigmas[i + 1],
            (sigmas[i + 1] ** 2 * (sigmas[i] ** 2 - sigmas[i + 1] ** 2) / sigmas[i] ** 2) ** 0.5,
        )
        sigma_down = (sigmas[i + 1] ** 2 - sigma_up**2) ** 0.5
        if sigma_down == 0:
            x = denoised
        else:
            d = (x - denoised) / sigmas[i]
            x = x + d * (sigma_down - sigmas[i]) + noise_sampler(sigmas[i], sigmas[i + 1]) * sigma_up
    return x


@pytest.mark.slow
def test_euler_ancestral_over_a_run_draws_comfyuis_noise(setup) -> None:
    """The whole of k_euler_ancestral's per-step noise comes from ComfyUI's stream: a run equals ComfyUI's
    sampler with its default noise sampler, and differs from one whose noise had the plain seed."""
    denoise, ms, noise = setup
    sigmas = make_sigmas("normal", ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    ours = K_SAMPLERS["euler_ancestral"](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)
    _close(ours, _comfy_sample_euler_ancestral(denoise, x, sigmas, SEED))
    # The same loop with the old stream (the seed itself) lands elsewhere: the noise is what is tested.
    old = _comfy_sample_euler_ancestral(denoise, x, sigmas, SEED - 1)
    assert float((ours - old).abs().mean()) > 1e-2


def _comfy_res_multistep(model, x, sigmas, noise_sampler, eta: float) -> torch.Tensor:
    """ComfyUI v0.8.0 comfy/k_diffusion/sampling.py `res_multistep` (cfg_pp off, s_noise 1), re-written
    here as the reference for ours (`sample_res_multistep` is eta 0, `_ancestral` eta 1)."""

    def sigma_fn(t):
        return t.neg().exp()

    def t_fn(sigma):
        return sigma.log().neg()

    def phi1_fn(t):
        return torch.expm1(t) / t

    def phi2_fn(t):
        return (phi1_fn(t) - 1.0) / t

    old_sigma_down = old_denoised = None
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i])
        if eta:
            sigma_up = min(
                sigmas[i + 1],
                eta * (sigmas[i + 1] ** 2 * (sigmas[i] ** 2 - sigmas[i + 1] ** 2) / sigmas[i] ** 2) ** 0.5,
            )
            sigma_down = (sigmas[i + 1] ** 2 - sigma_up**2) ** 0.5
        else:
            sigma_down, sigma_up = sigmas[i + 1], 0.0
        if sigma_down == 0 or old_denoised is None:
            x = x + (x - denoised) / sigmas[i] * (sigma_down - sigmas[i])
        else:
            t, t_old, t_next, t_prev = (
                t_fn(sigmas[i]),
                t_fn(old_sigma_down),
                t_fn(sigma_down),
                t_fn(sigmas[i - 1]),
            )
            h = t_next - t
            c2 = (t_prev - t_old) / h
            phi1_val, phi2_val = phi1_fn(-h), phi2_fn(-h)
            b1 = torch.nan_to_num(phi1_val - phi2_val / c2, nan=0.0)
            b2 = torch.nan_to_num(phi2_val / c2, nan=0.0)
            x = sigma_fn(h) * x + h * (b1 * denoised + b2 * old_denoised)
        if sigmas[i + 1] > 0:
            x = x + noise_sampler(sigmas[i], sigmas[i + 1]) * sigma_up
        old_denoised, old_sigma_down = denoised, sigma_down
    return x


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ("normal", "karras", "simple"))
@pytest.mark.parametrize("name", ("res_multistep", "res_multistep_ancestral"))
def test_res_multistep_equals_comfyuis(setup, name: str, schedule: str) -> None:
    denoise, ms, noise = setup
    sigmas = make_sigmas(schedule, ms, STEPS)
    x = initial_latent(torch.zeros_like(noise), noise, sigmas, ms)
    ours = K_SAMPLERS[name](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)
    eta = 1.0 if name.endswith("ancestral") else 0.0
    reference = _comfy_res_multistep(denoise, x, sigmas, _comfy_default_noise_sampler(x, SEED), eta)
    _close(ours, reference)
    # Second order: not the Euler result over the same sigmas (a dropped correction would be).
    euler = K_SAMPLERS["euler"](denoise, x, sigmas, SeededNoise(x, SEED), _ignore)
    assert name.endswith("ancestral") or float((ours - euler).abs().max()) > 1e-3


def test_sampler_node_path_runs_comfy_semantics_on_the_demo_model(kd, tmp_path: Path) -> None:
    """`sample()` with k_euler: one CPU randn of the batch, scaled by sqrt(1 + sigma_max^2), then Euler over
    the normal schedule with CFG on the denoised estimates: equal to composing those pieces by hand."""
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model

    sampling, _ = kd
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        model = load_model(mm, "demo:tiny-sd")
        positive = encode_prompt(mm, model.text_encoder, "a red square")
        negative = encode_prompt(mm, model.text_encoder, "")
        latents = Latents(samples=torch.zeros(2, 4, 8, 8), vae_scale_factor=model.denoiser.vae_scale_factor)
        settings = SamplerSettings(scheduler="k_euler", sigma_schedule="karras", steps=4, cfg=5.0, seed=SEED)
        steps: list[int] = []
        out = sample(
            mm, model.denoiser, positive, negative, latents, settings, on_step=lambda s: steps.append(s.step)
        )

        ms = DiscreteSigmas.from_scheduler_config(model.denoiser.scheduler_config)
        sigmas = make_sigmas("karras", ms, 4)
        noise = torch.randn(2, 4, 8, 8, generator=torch.Generator("cpu").manual_seed(SEED))
        embeds = torch.cat([negative.embeds.repeat(2, 1, 1), positive.embeds.repeat(2, 1, 1)])
        with mm.use(model.denoiser.handle) as unet:
            denoise = KDenoiser(
                unet, model.denoiser, ms, Conditioning(embeds, "sd"), None, cfg=5.0, do_cfg=True
            )
            with torch.no_grad():
                expected = sampling.sample_euler(
                    lambda x, s: denoise(x, s[0]), noise * (1 + sigmas[0] ** 2) ** 0.5, sigmas, disable=True
                )
    assert steps == [1, 2, 3, 4]
    _close(out.samples, expected, steps=4)
