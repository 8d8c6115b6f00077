"""What a pipeline reports after each step of a loop: the one `Step` value and its `OnStep` callback.

Lives here: `Step`, `OnStep`. May import: stdlib only (tensors ride along untyped, so the LLM runtime and
the diffusion samplers share it without importing each other).

This module is the one owner of "a step" below nodes/: the diffusion samplers (scheduler, flow and k-diffusion
loops) and the LLM decode loop all call `on_step(Step(...))`. A pipeline does not time its steps: the node's
`NodeContext.progress` reads the clock once per step and from that one reading emits the run event the CLI
and GUI show (`nodes.events.NodeProgress`, its kind a name in `nodes.events.PROGRESS_KINDS`) and the memory
telemetry record the step plot reads (`memory.telemetry.StepEvent`, through `MemoryManager.record_step`).
A callback may raise (`Cancelled`) to stop the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One finished step: explicit names, no `locals()`."""

    step: int  # 1-based: this many steps are done
    total: int
    timestep: float | None = None  # the diffusion timestep just taken (None for an LLM token)
    latents: Any = None  # torch.Tensor (B, C, h, w) after this step, for a diffusion loop
    # The model's current guess of the final latents (x0): what a live preview shows, since the noisy
    # latents are mostly noise halfway through. None where the scheduler does not tell.
    denoised: Any = None


OnStep = Callable[[Step], None]

__all__ = ["OnStep", "Step"]
