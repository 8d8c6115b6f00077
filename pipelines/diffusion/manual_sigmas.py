"""Hand-given sigma schedules (ComfyUI's SIGMAS values): parsing, LTXV's shifted schedule, and setting one on a
flow-matching scheduler.

Lives here: `parse_sigmas`, `check_sigmas`, `ltxv_scheduler_sigmas`, `set_manual_sigmas`, `noised_start`,
`SIGMA_LOOPS`. May import: stdlib, torch (inside the functions that need it: the importer parses lists
without loading torch).

A SIGMAS value is a tuple of floats from the first noise level to the last (ComfyUI's ManualSigmas ends its lists
with 0.0): a loop that takes one steps from sigmas[i] to sigmas[i + 1], len - 1 steps, with no shift applied
(ComfyUI's samplers use a SIGMAS input as it is). The first sigma also sets how much of the input latent is kept,
as ComfyUI's flow models noise it: x = sigma_0 * noise + (1 - sigma_0) * latent.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The denoiser_call of each loop that steps through a SIGMAS input (the others refuse one, naming the family).
SIGMA_LOOPS = ("ltx2", "qwenimage")

# ComfyUI's ManualSigmas reads every number in its text (comfy_extras/nodes_custom_sampler.py).
_NUMBER = re.compile(r"[-+]?(?:\d*\.*\d+)")


def parse_sigmas(text: str) -> tuple[float, ...]:
    """ "1.0, 0.725, 0.42, 0.0" -> (1.0, 0.725, 0.42, 0.0); ValueError naming the field when it is no schedule."""
    values = tuple(float(v) for v in _NUMBER.findall(text))
    check_sigmas(values, "field 'sigmas'")
    return values


def check_sigmas(sigmas: tuple[float, ...], where: str, *, flow: bool = False) -> None:
    """A schedule: at least two finite levels, none increasing; for a flow-matching loop (`flow`) in [0, 1]
    (other models' sigmas, ComfyUI's k-diffusion ones, go above 1)."""
    if len(sigmas) < 2:
        raise ValueError(f"{where}: a schedule needs at least two sigmas (one step), got {list(sigmas)}")
    if any(not math.isfinite(s) or s < 0.0 for s in sigmas):
        raise ValueError(f"{where}: sigmas are finite and not negative, got {list(sigmas)}")
    if flow and any(s > 1.0 for s in sigmas):
        raise ValueError(f"{where}: flow-matching sigmas lie in [0, 1], got {list(sigmas)}")
    if any(b > a for a, b in zip(sigmas, sigmas[1:], strict=False)):
        raise ValueError(
            f"{where}: sigmas must not increase (noise goes down step by step), got {list(sigmas)}"
        )


def ltxv_scheduler_sigmas(
    steps: int, max_shift: float, base_shift: float, stretch: bool, terminal: float, tokens: int
) -> tuple[float, ...]:
    """ComfyUI's LTXVScheduler: linspace(1, 0, steps + 1) shifted by mu = a line through (1024, base_shift) and
    (4096, max_shift) at `tokens` latent positions, then (stretch) rescaled so the last non-zero sigma is
    `terminal`."""
    import torch

    sigmas = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float32)
    slope = (max_shift - base_shift) / (4096 - 1024)
    shift = tokens * slope + (base_shift - slope * 1024)
    shifted = math.exp(shift) / (math.exp(shift) + (1 / sigmas - 1))
    sigmas = torch.where(sigmas != 0, shifted, torch.zeros_like(sigmas))
    if stretch:
        nonzero = sigmas != 0
        one_minus = 1.0 - sigmas[nonzero]
        sigmas[nonzero] = 1.0 - one_minus / (one_minus[-1] / (1.0 - terminal))
    return tuple(float(s) for s in sigmas)


def set_manual_sigmas(scheduler: Any, sigmas: tuple[float, ...], device: torch.device | str) -> torch.Tensor:
    """Put `sigmas` on a FlowMatchEulerDiscreteScheduler as they are (no shift, no terminal appended): its
    Euler step goes from sigmas[i] to sigmas[i + 1]. Returns the timesteps (sigma x num_train_timesteps)."""
    import torch

    levels = torch.tensor(sigmas, dtype=torch.float32)
    scheduler.sigmas = levels  # kept on the CPU, as diffusers does, so steps read it without a device sync
    scheduler.timesteps = (levels[:-1] * scheduler.config.num_train_timesteps).to(device)
    scheduler.num_inference_steps = len(sigmas) - 1
    scheduler._step_index = None
    scheduler.set_begin_index(0)
    return scheduler.timesteps


def noised_start(latent: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
    """ComfyUI's flow `noise_scaling`: the latent noised to `sigma` (pure noise at 1, the latent at 0)."""
    return noise * sigma + latent.to(noise.dtype) * (1.0 - sigma)
