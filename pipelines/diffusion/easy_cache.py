"""EasyCache: reuse a whole denoiser call on steps where its output is predicted to barely change.

Lives here: `EasyCacheState` (one sampling run's bookkeeping) and `easy_cache_hook` (a diffusers `ModelHook`
on the denoiser's top module that serves a call from the cache or runs it). Used by
`pipelines.diffusion.step_cache` for the Sampler's `cache: easy`.
May import: stdlib, torch, diffusers.hooks (inside `easy_cache_hook`).

The method is EasyCache (Zhou et al. 2025, "EasyCache: Training-Free Video Diffusion Acceleration via
Runtime-Adaptive Caching"), as ComfyUI's `EasyCache` node runs it: after each computed call the ratio
k = |output change| / |input change| is kept; on the next step the output change is predicted as
k * |input change| / |last output|, summed over the skipped steps, and while the sum stays below the
threshold the call returns its input plus the last computed (output - input). It needs no block list, so it
works on UNets as well as on the DiT families, and it skips whole denoiser calls (every block).

Differences from ComfyUI's node, stated: the start and end of the window are fractions of the steps (ComfyUI
converts them to sigmas), and the change rates are means over the whole tensor (ComfyUI subsamples 8x8).
The positive and negative passes of a step follow the first pass's decision, as ComfyUI's conds do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

_LATENT_NAMES = ("sample", "hidden_states", "x")


@dataclass
class EasyCacheState:
    threshold: float
    steps: int
    start: float  # fractions of the steps: skipping may start at `start` and stops at `end` (step_cache's)
    end: float
    step: int = 0
    branch: str = "cond"
    skipped: int = 0  # steps served from the cache (counted on the first branch)
    _first_branch: str | None = None
    _skip_step: int = -1
    _cumulative: float = 0.0
    _rate: float | None = None  # |output change| / |input change| of the last two computed calls
    _x_prev: torch.Tensor | None = None
    _out_prev: torch.Tensor | None = None
    _out_prev_norm: float | None = None
    _diffs: dict[str, torch.Tensor] = field(default_factory=dict)

    def call(self, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = _latent_input(args, kwargs)
        fraction = self.step / max(self.steps, 1)
        if x is None or fraction >= self.end:
            return forward(*args, **kwargs)
        branch = self.branch
        if self._first_branch is None:
            self._first_branch = branch
        first = branch == self._first_branch

        if not first and self._skip_step == self.step and branch in self._diffs:
            return self._served(x, branch, forward, args, kwargs)

        input_change: float | None = None
        if first and self._x_prev is not None and self._x_prev.shape == x.shape:
            input_change = float((x.float() - self._x_prev).abs().mean())
        if first and fraction >= self.start and input_change is not None:
            if self._rate is not None and self._out_prev_norm:
                self._cumulative += self._rate * input_change / self._out_prev_norm
                if self._cumulative < self.threshold and branch in self._diffs:
                    self._skip_step = self.step
                    self.skipped += 1
                    return self._served(x, branch, forward, args, kwargs)
                self._cumulative = 0.0

        output = forward(*args, **kwargs)
        out = _first_tensor(output)
        if out is None:
            return output
        aligned = _aligned(x, out)
        if aligned is None:  # input and output shapes have nothing in common: nothing to reuse
            return output
        out32 = out.float()
        if first:
            if (
                self._out_prev is not None
                and input_change is not None
                and self._out_prev.shape == out32.shape
            ):
                output_change = float((out32 - self._out_prev).abs().mean())
                self._rate = output_change / input_change if input_change > 0 else None
            self._x_prev = x.float().clone()
            self._out_prev = out32.clone()
            self._out_prev_norm = float(out32.abs().mean())
        self._diffs[branch] = out32 - aligned.float()
        return output

    def _served(self, x: torch.Tensor, branch: str, forward: Any, args: Any, kwargs: Any) -> Any:
        diff = self._diffs[branch]
        aligned = _aligned(x, diff)
        if aligned is None or aligned.shape != diff.shape:  # the batch layout changed: compute instead
            return forward(*args, **kwargs)
        return _wrapped((aligned.float() + diff).to(x.dtype))


def _latent_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    for name in _LATENT_NAMES:
        if name in kwargs:
            return _stacked(kwargs[name])
    return _stacked(args[0]) if args else None


def _stacked(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    # Z-Image takes a list of per-picture tensors of one shape.
    if isinstance(value, list) and value and all(isinstance(v, torch.Tensor) for v in value):
        if all(v.shape == value[0].shape for v in value):
            return torch.stack(value)
    return None


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, tuple) and output:
        output = output[0]
    if hasattr(output, "sample"):
        output = output.sample
    return _stacked(output)


def _wrapped(value: torch.Tensor) -> Any:
    # Every loop that can use this cache calls the denoiser with return_dict=False and reads `[0]`.
    return (value,)


def _aligned(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor | None:
    """The part of the input that lines up with the output: extra conditioning channels (an inpainting UNet's
    mask, Wan's image-to-video frames) or extra reference tokens come after the latent's own."""
    if x.shape == out.shape:
        return x
    if x.ndim != out.ndim or x.shape[0] != out.shape[0]:
        return None
    if x.shape[2:] == out.shape[2:] and x.shape[1] >= out.shape[1]:
        return x[:, : out.shape[1]]
    if x.shape[:-1] == out.shape[:-1] and x.shape[-1] >= out.shape[-1]:
        return x[..., : out.shape[-1]]
    return None


def easy_cache_hook(state: EasyCacheState) -> Any:
    """A diffusers ModelHook whose forward goes through `state.call`."""
    from diffusers.hooks import ModelHook

    class EasyCacheHook(ModelHook):
        _is_stateful = False

        def new_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            return state.call(self.fn_ref.original_forward, args, kwargs)

    return EasyCacheHook()
