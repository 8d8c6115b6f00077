"""Noise schedules as values (SIGMAS): a hand-written list, its first level changed, LTXV's shifted schedule.

Lives here: the node types `ManualSigmas`, `SetFirstSigma`, `LTXVScheduler` and the `NODES` tuple of their
specs. Imports `nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`; the arithmetic is
`pipelines.diffusion.manual_sigmas` (torch-free to parse, so listing node types stays light).

A SIGMAS value feeds a Sampler's `sigmas` input: the loop steps through it as it is (ComfyUI's
SamplerCustomAdvanced with a SIGMAS part), and its first level sets how much of the input latent is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import BOOL, FLOAT, INT, STRING
from nodes.spec import NodeSpec, Output
from nodes.types import LATENT, SIGMAS

if TYPE_CHECKING:
    from pipelines.diffusion.values import Latents


def _sigmas_problem(value: Any) -> str | None:
    from pipelines.diffusion.manual_sigmas import parse_sigmas

    try:
        parse_sigmas(str(value))
    except ValueError as exc:
        return str(exc).removeprefix("field 'sigmas': ")
    return None


@node_type(
    "ManualSigmas",
    tags=("ManualSigmas", "schedule", "sigmas"),
    title="Manual Sigmas",
    category="diffusion/sampling",
    outputs=[Output("sigmas", SIGMAS)],
    description="A hand-written noise schedule (every number in the text, first to last) for a Sampler's sigmas.",
)
class ManualSigmas(Node):
    sigmas: str = param(
        STRING,
        "1, 0.5, 0",
        help="noise levels from first to last (end with 0 for a clean result); len - 1 steps",
        validate=_sigmas_problem,
        comfy="sigmas",
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.manual_sigmas import parse_sigmas

        return {"sigmas": parse_sigmas(self.sigmas)}


@node_type(
    "SetFirstSigma",
    tags=("SetFirstSigma", "sigmas"),
    title="Set First Sigma",
    category="diffusion/sampling",
    outputs=[Output("sigmas", SIGMAS)],
    description="The same schedule with its first noise level replaced.",
)
class SetFirstSigma(Node):
    sigmas: tuple[float, ...] = wire(SIGMAS)
    sigma: float = param(
        FLOAT, 136.0, min=0.0, max=20000.0, step=0.001, help="the new first level", comfy="sigma"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.manual_sigmas import check_sigmas

        out = (float(self.sigma), *self.sigmas[1:])
        check_sigmas(out, "field 'sigma'")
        return {"sigmas": out}


@node_type(
    "LTXVScheduler",
    tags=("LTXVScheduler", "sigmas", "LTX-2"),
    title="LTXV Scheduler",
    category="diffusion/sampling",
    outputs=[Output("sigmas", SIGMAS)],
    description="ComfyUI's LTXV schedule: steps + 1 levels shifted by the latent's token count, stretched to a "
    "terminal level.",
)
class LTXVScheduler(Node):
    latent: Latents | None = wire(LATENT, optional=True, help="its frames x height x width set the shift")
    steps: int = param(INT, 20, min=1, max=10000, comfy="steps")
    max_shift: float = param(FLOAT, 2.05, min=0.0, max=100.0, step=0.01, comfy="max_shift")
    base_shift: float = param(FLOAT, 0.95, min=0.0, max=100.0, step=0.01, comfy="base_shift")
    stretch: bool = param(BOOL, True, help="rescale so the last non-zero level is terminal", comfy="stretch")
    terminal: float = param(FLOAT, 0.1, min=0.0, max=0.99, step=0.01, comfy="terminal")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from math import prod

        from pipelines.diffusion.manual_sigmas import ltxv_scheduler_sigmas

        # ComfyUI: 4096 tokens without a latent, else the product of the latent's dimensions after B, C.
        tokens = 4096 if self.latent is None else prod(self.latent.samples.shape[2:])
        sigmas = ltxv_scheduler_sigmas(
            self.steps, self.max_shift, self.base_shift, self.stretch, self.terminal, tokens
        )
        return {"sigmas": sigmas}


NODES: tuple[NodeSpec, ...] = (ManualSigmas.spec, SetFirstSigma.spec, LTXVScheduler.spec)
