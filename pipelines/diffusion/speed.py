"""Speed choices for a denoising run, per device, by a stated rule from measurements (issue 33).

Lives here: `SpeedChoices` (what a run does for speed: attention backend, memory format, compilation, CFG
batching, threads) and `speed_choices` (the rule that picks them for a device), `describe` (the one line the
Sampler logs) and `metrics` (the report's figures).
May import: stdlib, torch (inside `speed_choices`).

The rule is the measured one: each option below was timed against the plain path in one process,
alternating (benchmarks/diffusion_speed.py; the A/B figures are in the README, "Diffusion speed"), and an
option is on for a device only where it was faster there and kept the picture within uint8 max difference 1
of diffusers'. On this CPU (AMD EPYC, AVX-512, 2 cores, oneDNN 3.12, torch 2.13) none of the alternatives
paid, so a CPU run takes torch's and diffusers' defaults and says so:
- attention: torch's SDPA default (flash attention for CPU); the math backend took 1.8x the UNet's time.
- memory format: contiguous; channels_last took 0.996x (input only) and 1.015x (weights too) of the UNet's
  CPU time (within the noise of 6 alternating rounds) and 0.96-0.97x of the VAE decode's, at a float
  difference of 3e-5, which can move a uint8 pixel by one: not worth changing every existing picture.
- compile: off; regional `torch.compile` of the UNet's repeated blocks took 327 s (70 s CPU) to compile on
  2 busy cores, hit dynamo's recompile limit (each block has its own shapes) and ran at 1.04x eager.
- grad mode: `torch.no_grad` (as diffusers); `torch.inference_mode` took 1.013x, identical picture.
- fused QKV projections (`fuse_qkv_projections`): 1.03x, identical picture: not used.
- CFG: one doubled batch (as diffusers' pipelines), so one denoiser call per step.
- threads: torch's default (one per core); fewer threads spend less CPU on a loaded machine but more wall
  time on a quiet one.
On CUDA nothing is decided yet (no GPU was measured): the same defaults, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedChoices:
    device: str
    attention: str = "sdpa-default"
    channels_last: bool = False
    compiled: bool = False
    cfg_batched: bool = True
    threads: int = 0  # torch's intra-op threads at the run (0: not a CPU run)
    why: str = ""


def speed_choices(device: str) -> SpeedChoices:
    """The rule: what a run on `device` does for speed (see the module docstring for the measurements)."""
    import torch

    kind = device.split(":", 1)[0]
    if kind == "cpu":
        why = "measured on CPU: no alternative beat the defaults at the same picture"
        return SpeedChoices("cpu", threads=torch.get_num_threads(), why=why)
    return SpeedChoices(kind, why=f"not measured on {kind}: defaults")


def describe(choices: SpeedChoices) -> str:
    """One line for the Sampler's log: every choice named, and why."""
    threads = f", {choices.threads} threads" if choices.threads else ""
    return (
        f"speed choices ({choices.device}): attention {choices.attention}, "
        f"{'channels_last' if choices.channels_last else 'contiguous'}, "
        f"compile {'on' if choices.compiled else 'off'}, "
        f"CFG {'one batch' if choices.cfg_batched else 'two passes'}{threads} ({choices.why})"
    )


def metrics(choices: SpeedChoices) -> dict[str, float]:
    """The report's figures (`speed_*` on the Sampler node): 1.0 for an option that is on."""
    return {
        "speed_channels_last": float(choices.channels_last),
        "speed_compiled": float(choices.compiled),
        "speed_cfg_batched": float(choices.cfg_batched),
        "speed_threads": float(choices.threads),
    }
