"""A sampler's result that is not a number: say so at the Sampler, not three nodes later in an encoder.

Lives here: `DivergedError`, `check_finite_latents`. May import: torch, `pipelines.diffusion.values`.

Without this check a NaN latent decodes to NaN frames, and the first node that notices is a Save node, with a
codec's message ("avcodec_send_frame() returned 22"). The commonest cause seen here is a schedule with a terminal
shift (`shift_terminal` in the scheduler config: LTX-2, Qwen-Image) at one step: diffusers' scheduler stretches the
sigmas so the last one lands on the terminal value, and with a single sigma that stretch is 0 / 0.
"""

from __future__ import annotations

import torch

from pipelines.diffusion.values import Latents


class DivergedError(ValueError):
    """The sampling produced NaN or infinite values."""


def check_finite_latents(latents: Latents, steps: int, scheduler_config: dict) -> None:
    """Raise `DivergedError` naming the likely cause when the samples (or the sound track's) are not finite."""
    tracks = {"latents": latents.samples, "sound latents": latents.audio}
    bad = [name for name, t in tracks.items() if t is not None and not bool(torch.isfinite(t).all())]
    if not bad:
        return
    what = " and ".join(bad)
    terminal = scheduler_config.get("shift_terminal")
    if steps == 1 and terminal:
        raise DivergedError(
            f"the sampler's {what} are NaN: at 1 step this model's schedule (shift_terminal {terminal:g}) "
            "divides by zero; set steps to 2 or more"
        )
    raise DivergedError(
        f"the sampler's {what} contain NaN or infinite values (the sampling diverged): try more steps, "
        "a lower cfg, or float32 weights"
    )
