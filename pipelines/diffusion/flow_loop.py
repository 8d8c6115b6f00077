"""What the flow-matching denoising loops share: their input checks and their per-step report.

Lives here: `FLOW_SCHEDULERS`, `check_flow_scheduler`, `check_flow_inputs`, `flow_denoised`, `StepReport`.
May import: stdlib, torch, pipelines.steps, pipelines.diffusion.sampling, pipelines.diffusion.values.

The loops themselves (FLUX.1 and SD3 in `flow_sampling`, and FLUX.2, FLUX.3, Krea 2, Qwen-Image, Qwen-Image 2.1,
Z-Image, Wan in their own `*_sampling` modules) stay written out step by step, as diffusers' pipelines are; what
they did alike is here, once: `check_flow_inputs` is their "1. Check inputs" (each refusal one line that names
the fix), and a `StepReport` built before the loop sends each finished step to the node's callback as a
`pipelines.steps.Step` (progress, the live preview's latents and x0; the callback may raise to cancel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import DenoiserRef, Latents
from pipelines.steps import OnStep, Step

FLOW_SCHEDULERS = ("default", "euler")


def check_flow_scheduler(denoiser: DenoiserRef, settings: SamplerSettings) -> None:
    if settings.scheduler not in FLOW_SCHEDULERS:
        raise ValueError(
            f"{denoiser.family.title} is a flow-matching model: scheduler must be one of "
            f"{', '.join(FLOW_SCHEDULERS)} (flow-matching Euler), not {settings.scheduler!r}"
        )


def check_flow_inputs(
    denoiser: DenoiserRef,
    latents: Latents,
    settings: SamplerSettings,
    *,
    patch: int = 2,
    how: str = "packs 2x2 latent patches",
    channels: int | None = None,
    any_empty_channels: bool = False,
    img2img: bool = True,
) -> None:
    """Refuse what an image loop cannot run, before anything loads: a scheduler other than flow-matching
    Euler; denoise below 1 where the loop has no image-to-image (`img2img` False); latent sides that are not
    multiples of the `patch` the transformer cuts them into (`how` says how, in the message); a latent of other
    than `channels` channels (None: any). `any_empty_channels`: an Empty Latent's channels are free, as the loop
    draws its noise at the transformer's width and only reads the latent's shape."""
    check_flow_scheduler(denoiser, settings)
    title = denoiser.family.title
    if settings.denoise < 1.0 and not img2img:
        raise ValueError(
            f"{title} has no image-to-image (denoise below 1; diffusers has no img2img pipeline for it): "
            "set denoise to 1"
        )
    _, given, h, w = latents.samples.shape
    if h % patch or w % patch:
        rule = "even" if patch == 2 else f"a multiple of {patch}"
        raise ValueError(
            f"{title} {how}: the latent size must be {rule}, got {h}x{w} "
            f"(image sides must be multiples of {patch * latents.vae_scale_factor})"
        )
    if any_empty_channels and latents.source == "empty":
        return
    if channels is not None and given != channels:
        raise ValueError(
            f"{title} takes {channels}-channel latents, got {given} (make the latent with this model's VAE)"
        )


def flow_denoised(scheduler: Any, before: torch.Tensor, velocity: torch.Tensor) -> torch.Tensor:
    """x0 from a flow step: x_t = (1 - s) x0 + s noise and v = noise - x0, so x0 = x_t - s v."""
    sigma = scheduler.sigmas[scheduler.step_index - 1].to(before.dtype)  # the sigma this step started at
    return before - sigma * velocity


X0 = Callable[
    [Any, torch.Tensor, torch.Tensor], torch.Tensor
]  # (scheduler, x before the step, velocity) -> x0


@dataclass(frozen=True)
class StepReport:
    """Sends each finished step of a flow loop to `on_step` (nothing is computed when it is None).

    `unpack` turns the loop's working latents into what a preview reads, (B, C, h, w): packed tokens unpacked,
    a video's middle frame; None where the loop already keeps that layout. `x0` is the clean-latent estimate
    from the step's start and its velocity (`flow_denoised` unless the loop says otherwise)."""

    on_step: OnStep | None
    total: int  # steps in the schedule: the report's `total`
    scheduler: Any  # the loop's scheduler, after its `step` (x0 reads the sigma that step started at)
    unpack: Callable[[torch.Tensor], torch.Tensor] | None = None
    x0: X0 = flow_denoised

    def __call__(
        self, i: int, t: torch.Tensor, before: torch.Tensor, x: torch.Tensor, velocity: torch.Tensor
    ) -> None:
        """Step `i` (0-based in the schedule) at timestep `t` took `before` to `x` along `velocity`."""
        if self.on_step is None:
            return
        unpack = self.unpack or _same
        self.on_step(
            Step(
                step=i + 1,
                total=self.total,
                timestep=float(t),
                latents=unpack(x),
                denoised=unpack(self.x0(self.scheduler, before, velocity)),
            )
        )


def _same(x: torch.Tensor) -> torch.Tensor:
    return x
