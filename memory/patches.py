"""Weight patches (LoRA and the like) applied per layer, on top of whatever placement a policy chose.

Lives here: `LayerPatch`, `PatchState`, `apply_patches`, `remove_patches`, `patch_state`, `fused_bytes`,
`PatchEvent`, `PATCH_HOOK`, `PATCH_MODES`.
May import: stdlib, torch, memory.policies.hooks (never nodes, pipelines, app or Qt).

A patch is a function that, given a layer's current weight, returns the delta to add to it (computed from
small low-rank factors, so it is cheap to recompute). Two modes:

- `fused`: each patched layer's weight is replaced once by `weight + delta`. Faster per step; costs one
  extra copy of each patched layer while patched (on CPU the original stays referenced, untouched, usually
  memory-mapped from the file; on an accelerator the original moves to host memory). Removal puts the
  original tensors back, so the weights are restored bit for bit without reading the file again.
- `on_the_fly`: a forward pre-hook swaps in `weight + delta` for the duration of the layer's forward and
  the post-hook swaps the original back. At most one patched layer copy exists at a time, and it composes
  with streaming: a streamed block's weights are placed by the block's own hook first, then the layer's
  patch is computed from them. Both modes compute `weight + delta` with the same function, so they give
  bit-identical outputs.

The base weights are never copied whole: only the patched layers are touched, one layer at a time.
The ledger counts what a fused patch keeps (`MemoryManager.patch`): the originals in `PatchState.originals`
are the handle's bytes like its module's own tensors (memory.placement reads both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from memory.policies.hooks import add_hooks, remove_hooks

PATCH_HOOK = "weight_patch"
PATCH_MODES = ("fused", "on_the_fly")
_STATE_ATTR = "_nodeloom_patches"

# Given a layer's current weight, the delta to add (same shape; any float dtype, on any device).
DeltaFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PatchEvent:
    """Telemetry record: patches applied to (or removed from) one model, and how."""

    component: str
    mode: str  # "fused" | "on_the_fly" | "removed"
    layers: int
    patches: str  # a short description, e.g. "outline.safetensors x0.8"
    nbytes: int  # extra bytes the mode holds (fused: patched layer copies; on the fly: the largest layer)
    seconds: float
    t: float = 0.0


@dataclass
class LayerPatch:
    """The deltas to add to one layer's `weight`, summed in order (stacked LoRAs)."""

    module: torch.nn.Module
    deltas: list[DeltaFn]

    def patched(self, weight: torch.Tensor) -> torch.Tensor:
        """`weight + sum(deltas)`, accumulated in float32 and cast back to the weight's dtype."""
        total = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for delta in self.deltas:
            total += delta(weight).to(device=weight.device, dtype=torch.float32).reshape(weight.shape)
        return (weight.float() + total).to(weight.dtype)


@dataclass
class PatchState:
    """What is applied to a module now. `signature` identifies the patch set (files and strengths)."""

    signature: tuple
    mode: str
    layers: dict[str, LayerPatch]
    # fused: layer name -> the original weight (on an accelerator: its host copy)
    originals: dict[str, torch.Tensor] = field(default_factory=dict)

    def extra_bytes(self) -> int:
        if self.mode == "fused":
            return fused_bytes(self.layers)
        return max(_layer_bytes(self.layers), default=0)


def _layer_bytes(layers: dict[str, LayerPatch]) -> list[int]:
    return [_weight(lp.module).numel() * _weight(lp.module).element_size() for lp in layers.values()]


def fused_bytes(layers: dict[str, LayerPatch]) -> int:
    """What fusing `layers` holds beside the model: one copy of each patched layer's weight."""
    return sum(_layer_bytes(layers))


def _weight(module: torch.nn.Module) -> torch.Tensor:
    return module._parameters["weight"].data


def _set_weight(module: torch.nn.Module, t: torch.Tensor) -> None:
    module._parameters["weight"].data = t


def patch_state(module: torch.nn.Module) -> PatchState | None:
    return module.__dict__.get(_STATE_ATTR)


def apply_patches(
    module: torch.nn.Module, layers: dict[str, LayerPatch], *, mode: str, signature: tuple
) -> PatchState:
    """Patch `layers` (name -> LayerPatch) of `module` in `mode`. Call `remove_patches` first if patched."""
    if mode not in PATCH_MODES:
        raise ValueError(f"patch mode {mode!r} (expected one of {PATCH_MODES})")
    if patch_state(module) is not None:
        raise RuntimeError(f"{type(module).__name__} is already patched; remove the patches first")
    state = PatchState(signature, mode, layers)
    with torch.no_grad():
        for name, lp in layers.items():
            if mode == "fused":
                original = _weight(lp.module)
                fused = lp.patched(original)
                # On an accelerator keep the original in host memory (device memory is the scarce one).
                keep = original if original.device.type == "cpu" else original.to("cpu")
                _set_weight(lp.module, fused)
                state.originals[name] = keep
            else:
                add_hooks(lp.module, PATCH_HOOK, pre=_pre_hook(lp), post=_post_hook(lp))
    module.__dict__[_STATE_ATTR] = state
    return state


def _pre_hook(lp: LayerPatch) -> Callable[[torch.nn.Module, object], None]:
    def pre(mod: torch.nn.Module, _args: object) -> None:
        original = _weight(mod)
        mod.__dict__["_nodeloom_unpatched"] = original
        with torch.no_grad():
            _set_weight(mod, lp.patched(original))

    return pre


def _post_hook(lp: LayerPatch) -> Callable[[torch.nn.Module, object, object], None]:
    def post(mod: torch.nn.Module, _args: object, _out: object) -> None:
        original = mod.__dict__.pop("_nodeloom_unpatched", None)
        if original is not None:
            _set_weight(mod, original)

    return post


def remove_patches(module: torch.nn.Module) -> PatchState | None:
    """Undo `apply_patches`: originals go back in place (bit for bit), hooks come off. Returns the old state.

    A fused layer whose weight is an empty placeholder now (a streaming policy released its block) is left
    alone: its block is read back from the file, unpatched, when it runs next.
    """
    state: PatchState | None = module.__dict__.pop(_STATE_ATTR, None)
    if state is None:
        return None
    with torch.no_grad():
        for name, lp in state.layers.items():
            if state.mode == "fused":
                original = state.originals[name]
                current = _weight(lp.module)
                if current.shape == original.shape:
                    if original.device != current.device:
                        current.copy_(original)  # back onto the accelerator, into the same storage
                    else:
                        _set_weight(lp.module, original)
            else:
                remove_hooks(lp.module, PATCH_HOOK)
    state.originals.clear()
    return state
