"""How a sampler combines its positive and negative predictions where a family's diffusers rule and ComfyUI's differ.

Lives here: `CFG_RULES` (the one list of names the Sampler's `cfg_rule` field offers), `CFG_RULE_LOOPS`,
`check_cfg_rule`, `runs_negative`, `comfy_cfg`, `cfg_norm`, `comfy_guidance`. May import: stdlib (the
functions take torch tensors and use their methods: the node declarations read `CFG_RULES` without torch).

Issue 26's contract: `sampler.cfg` is the family's diffusers guidance scale with that pipeline's own rule, and
the importer converts ComfyUI's cfg to it (Z-Image's offset, `Family.comfy_cfg_offset`). For Qwen-Image no
number converts: diffusers' QwenImagePipeline rescales the combined prediction to the positive one's norm
(`qwenimage_sampling.true_cfg`), ComfyUI's KSampler does not. So the rule is a Sampler setting, `cfg_rule`:

- `pipeline` (the default, native graphs): the family's diffusers rule; the negative runs at cfg > 1.
- `comfyui` (what the importer sets on Qwen-Image samplers): ComfyUI's plain CFG, `uncond + cfg * (cond -
  uncond)` (comfy/samplers.py `cfg_function`); the negative runs unless cfg is 1 (its `math.isclose` skip).
- `comfyui_cfgnorm`: that, then ComfyUI's CFGNorm node (comfy_extras/nodes_cfg.py, the post-CFG form,
  `pre_cfg` off) at strength `cfg_norm`. It works on x0 ("denoised") predictions in ComfyUI's latent layout
  (B, C, h, w): each latent pixel's guided x0 is scaled down to at most the conditional x0's norm over the
  channels, then times the strength. It runs at cfg 1 too, where ComfyUI's guided prediction is the
  conditional one. For a flow model ComfyUI's x0 is `x - sigma * v` (CONST model sampling), and the step
  takes the velocity back as `(x - x0) / sigma`; a linear combination is the same in either space, CFGNorm
  is not, so it is applied in x0 space as ComfyUI does, in float32 (ComfyUI's latents are float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CFG_RULES: tuple[str, ...] = ("pipeline", "comfyui", "comfyui_cfgnorm")
# The loops that read `cfg_rule` (`Family.denoiser_call` values): Qwen-Image / Qwen-Image-Edit and Qwen-Image
# 2.1. The other families' pipelines guide as ComfyUI does, or by a cfg the importer converts.
CFG_RULE_LOOPS: tuple[str, ...] = ("qwenimage", "qwenimage21")
CFG_NORM_EPS = 1e-8  # ComfyUI's, added to the guided x0's norm


def check_cfg_rule(rule: str, denoiser_call: str, title: str) -> None:
    if rule not in CFG_RULES:
        raise ValueError(f"cfg_rule {rule!r}: one of {', '.join(CFG_RULES)}")
    if rule != "pipeline" and denoiser_call not in CFG_RULE_LOOPS:
        raise ValueError(
            f"cfg_rule {rule!r}: ComfyUI's guidance rules run in the Qwen-Image loops; {title}'s sampler "
            "guides as its pipeline does (set cfg_rule to pipeline)"
        )


def runs_negative(rule: str, cfg: float, negative_wired: bool) -> bool:
    """Whether the negative prompt gets its own call: the pipelines' `cfg > 1`, ComfyUI's `cfg != 1`."""
    if not negative_wired:
        return False
    return cfg > 1.0 if rule == "pipeline" else not math.isclose(cfg, 1.0)


def comfy_cfg(cond: torch.Tensor, uncond: torch.Tensor, cfg: float) -> torch.Tensor:
    """ComfyUI's combination, in any space the predictions share."""
    return uncond + (cond - uncond) * cfg


def cfg_norm(denoised: torch.Tensor, cond_denoised: torch.Tensor, strength: float) -> torch.Tensor:
    """ComfyUI's CFGNorm on x0 predictions (B, C, ...): per position, at most the conditional one's norm over
    the channels (dim 1), times `strength`."""
    cond_norm = cond_denoised.norm(dim=1, keepdim=True)
    scale = (cond_norm / (denoised.norm(dim=1, keepdim=True) + CFG_NORM_EPS)).clamp(min=0.0, max=1.0)
    return denoised * scale * strength


def comfy_guidance(
    rule: str,
    cfg: float,
    strength: float,
    cond: torch.Tensor,
    uncond: torch.Tensor | None,
    x: torch.Tensor,
    sigma: float,
    to_latent: Callable[[torch.Tensor], torch.Tensor],
    from_latent: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """A flow loop's velocity under `comfyui` / `comfyui_cfgnorm`: `cond`, `uncond` (None: not run) and the
    sample `x` in the loop's token layout; `to_latent` / `from_latent` turn that into ComfyUI's (B, C, h, w)."""
    guided = cond if uncond is None else comfy_cfg(cond, uncond, cfg)
    # sigma 0 never reaches the model (the last level is only a step's target); x0 would be x itself there.
    if rule != "comfyui_cfgnorm" or sigma <= 0.0:
        return guided
    x32 = to_latent(x).float()
    denoised = x32 - sigma * to_latent(guided).float()
    normed = cfg_norm(denoised, x32 - sigma * to_latent(cond).float(), strength)
    return from_latent((x32 - normed) / sigma).to(guided.dtype)
