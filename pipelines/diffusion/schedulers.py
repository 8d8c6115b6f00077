"""Scheduler choice by name: the diffusers class behind each sampler name a node offers.

Lives here: `SCHEDULERS`, `SCHEDULER_NAMES`, `make_scheduler`. May import: stdlib; diffusers inside
`make_scheduler` only, so a node's choices (`SCHEDULER_NAMES`) are known without importing diffusers.

A scheduler is always built from the model's own `scheduler_config.json` (`Class.from_config(config)`), the
way diffusers swaps schedulers on a pipeline, so betas, prediction type and timestep spacing stay the
model's. "default" keeps the class the model was saved with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diffusers.schedulers.scheduling_utils import SchedulerMixin

# name -> (diffusers class name, config overrides). DPM++ 2M is DPMSolverMultistep's default (dpmsolver++, order 2).
SCHEDULERS: dict[str, tuple[str, dict[str, Any]]] = {
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_ancestral": ("EulerAncestralDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++", "solver_order": 2}),
    "ddim": ("DDIMScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
}
SCHEDULER_NAMES: tuple[str, ...] = ("default", *SCHEDULERS)

# ComfyUI's sampler_name and scheduler values, run by our k-diffusion-style loop (pipelines.diffusion.k_sampling).
# Declared here, with no torch import, so node types list them without loading any sampler code.
K_SAMPLER_NAMES: tuple[str, ...] = (
    "euler",
    "euler_ancestral",
    "heun",
    "dpm_2",
    "dpmpp_2m",
    "dpmpp_2m_sde",
    "dpmpp_sde",
    "ddim",
    "uni_pc",
    "lcm",
    "dpm_2_ancestral",
    "dpmpp_2s_ancestral",
    "res_multistep",
    "res_multistep_ancestral",
    "gradient_estimation",
)
K_PREFIX = "k_"
# The ones ComfyUI runs unchanged on a flow-matching model (its ancestral/SDE/LCM samplers take other steps there):
# Wan's loop runs them over ComfyUI's flow sigmas (pipelines.diffusion.wan_k_sampling).
FLOW_K_SAMPLERS: tuple[str, ...] = ("uni_pc", "dpmpp_2m", "heun", "dpm_2", "ddim", "res_multistep")
K_SCHEDULER_NAMES: tuple[str, ...] = tuple(K_PREFIX + name for name in K_SAMPLER_NAMES)
SIGMA_SCHEDULES: tuple[str, ...] = (
    "normal",
    "karras",
    "exponential",
    "sgm_uniform",
    "simple",
    "ddim_uniform",
    "beta",
)


def make_scheduler(name: str, config: dict[str, Any]) -> SchedulerMixin:
    """A fresh scheduler (schedulers keep per-run state: one per sampling run)."""
    import diffusers

    if name == "default":
        cls = getattr(diffusers, config["_class_name"])
        return cls.from_config(config)
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULER_NAMES)}")
    class_name, overrides = SCHEDULERS[name]
    return getattr(diffusers, class_name).from_config(config, **overrides)
