"""The flow loops' shared pieces (`pipelines.diffusion.flow_loop`) without a model: the step report's numbers
and its x0, and each input refusal's one line. The loops themselves run in tests/test_family_*.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import Latents
from pipelines.steps import Step


def _denoiser() -> Any:
    return SimpleNamespace(family=SimpleNamespace(title="Tiny"))  # the checks read only the family's title


def test_the_report_numbers_steps_from_one_and_recovers_x0_from_the_true_velocity() -> None:
    scheduler = FlowMatchEulerDiscreteScheduler()
    scheduler.set_timesteps(3)
    clean, noise = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2)
    x = scheduler.scale_noise(clean, scheduler.timesteps[:1], noise)
    velocity = noise - clean  # what a perfect flow model predicts
    seen: list[Step] = []
    report = StepReport(seen.append, len(scheduler.timesteps), scheduler, unpack=lambda z: z[:, :2])
    for i, t in enumerate(scheduler.timesteps[:2]):
        before = x
        x = scheduler.step(velocity, t, x, return_dict=False)[0]
        report(i, t, before, x, velocity)
    assert [(s.step, s.total) for s in seen] == [(1, 3), (2, 3)]
    assert seen[1].timestep == float(scheduler.timesteps[1])
    assert torch.equal(seen[1].latents, x[:, :2])
    # x0 = x_t - sigma v at the step's starting sigma: float32 rounding of the scale_noise/step arithmetic.
    torch.testing.assert_close(seen[0].denoised, clean[:, :2], rtol=0, atol=1e-5)


def test_without_a_callback_the_report_computes_nothing() -> None:
    def fail(*_: object) -> torch.Tensor:
        raise AssertionError("computed without a callback")

    StepReport(None, 1, scheduler=None, unpack=fail, x0=fail)(0, torch.tensor(1.0), *[torch.zeros(1)] * 3)


@pytest.mark.parametrize(
    ("shape", "kwargs", "settings", "message"),
    [
        ((1, 4, 7, 8), {}, {}, "Tiny packs 2x2 latent patches: the latent size must be even, got 7x8 "),
        (
            (1, 4, 6, 8),
            {"patch": 4, "how": "cuts 4x4"},
            {},
            "must be a multiple of 4, got 6x8 (image sides must be multiples of 32)",
        ),
        ((1, 5, 8, 8), {"channels": 4}, {}, "Tiny takes 4-channel latents, got 5"),
        ((1, 4, 8, 8), {"img2img": False}, {"denoise": 0.5}, "Tiny has no image-to-image"),
        ((1, 4, 8, 8), {}, {"scheduler": "dpmpp_2m"}, "scheduler must be one of default, euler"),
    ],
)
def test_each_refusal_is_one_line_naming_the_model_and_the_fix(
    shape: tuple[int, ...], kwargs: dict, settings: dict, message: str
) -> None:
    latents = Latents(torch.zeros(shape), vae_scale_factor=8, source="encoded")
    with pytest.raises(ValueError) as caught:
        check_flow_inputs(
            _denoiser(), latents, SamplerSettings(**{"scheduler": "euler", **settings}), **kwargs
        )
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_empty_latent_may_have_any_channels_where_the_loop_draws_its_own_noise() -> None:
    empty = Latents(torch.zeros(1, 4, 8, 8), vae_scale_factor=8, source="empty")
    check_flow_inputs(
        _denoiser(), empty, SamplerSettings(scheduler="euler"), channels=32, any_empty_channels=True
    )
    with pytest.raises(ValueError, match="takes 32-channel latents"):
        check_flow_inputs(_denoiser(), empty, SamplerSettings(scheduler="euler"), channels=32)
