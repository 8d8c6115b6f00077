"""LoRA patches on diffusion models: the LoRA weights as managed components, and `use_*` that patch on place.

Lives here: `LoraWeights`, `lora_handle`, `make_patch`, `check_lora`, `use_denoiser`, `use_text_encoder`,
`patch_mode`, `LoraMatch`.
May import: stdlib, torch, memory, pipelines.diffusion.values/families/lora_formats.

A LoRA travels on the wire as `LoraPatch`es (file, strength) attached to a `DenoiserRef`/`TextEncoderRef`;
nothing is patched until a pipeline function places the model through `use_denoiser`/`use_text_encoder`.
Then each LoRA file is itself a component of the memory manager (kind "lora": its own ledger row, counted
from the file's header, placed and evicted by the policy like any model), and the patch goes on layer by
layer through `memory.patches`, by the manager (`mm.patch`), which counts what a fused patch keeps:

- policies `none` and `auto`, model fully resident: **fused** (faster per step). The fused weights stay
  between runs while the same LoRAs at the same strengths are asked for, and are put back (bit for bit,
  without reading the file) the first time a different set is.
- `sequential`, `stream`, or a model the policy streams: **on the fly** (less memory: at most one patched
  layer at a time, and it works on streamed blocks, whose weights only exist during their forward).

Each choice is a `PatchEvent` in the memory report (`report()["patches"]`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle, Working
from memory.patches import LayerPatch, PatchEvent, patch_state
from pipelines.diffusion.lora_formats import LayerWeights, LoraFile, read_lora
from pipelines.diffusion.values import DenoiserRef, LoraPatch, TextEncoderRef
from pipelines.model_keys import component_keys, precision_label

log = logging.getLogger(__name__)

_TEXT_TARGETS = ("text_encoder", "text_encoder_2", "text_encoder_3")
_SAMPLE = 5  # unmatched keys listed in an error or warning


class LoraWeights(torch.nn.Module):
    """One LoRA file's factors as buffers, so the memory manager can place, count and evict them."""

    def __init__(self, lora: LoraFile) -> None:
        super().__init__()
        self.layout = lora.layout
        # (target, module path, kind, alpha, {factor: buffer name}); buffer names can't hold dots.
        self.index: list[tuple[str, str, str, float | None, dict[str, str]]] = []
        for target, layers in lora.targets.items():
            for module, w in layers.items():
                names = {}
                for factor, t in w.factors.items():
                    name = f"f{len(self._buffers)}"
                    self.register_buffer(name, t)
                    names[factor] = name
                self.index.append((target, module, w.kind, w.alpha, names))

    def layers(self, target: str) -> dict[str, LayerWeights]:
        """The layers for `target`, reading the buffers where they are now (device or host)."""
        return {
            module: LayerWeights(kind, {f: self._buffers[n] for f, n in names.items()}, alpha)
            for t, module, kind, alpha, names in self.index
            if t == target
        }


def make_patch(
    path: Path, strength: float, targets: tuple[str, ...] = (), *, allow_pickle: bool = False
) -> LoraPatch:
    st = path.stat()
    return LoraPatch(
        path=path,
        strength=float(strength),
        stamp=(st.st_mtime_ns, st.st_size),
        targets=targets,
        allow_pickle=allow_pickle,
    )


def lora_handle(
    mm: MemoryManager, patch: LoraPatch, family: str, denoiser_config: dict[str, Any]
) -> ModelHandle:
    """Register (once per file version and dtype) the LoRA file as a component; loads nothing."""
    dtype = torch.float32 if mm.device.type == "cpu" else torch.float16

    def build() -> torch.nn.Module:
        return LoraWeights(
            read_lora(patch.path, family, denoiser_config, allow_pickle=patch.allow_pickle)
        ).to(dtype)

    return mm.register(
        ComponentSpec(
            **component_keys(
                patch.path,
                f"lora-{family}",
                precision_label(dtype),
                stamp=f"{patch.stamp[0]}:{patch.stamp[1]}",
            ).spec_fields(),
            name=f"lora {patch.path.stem}",
            kind="lora",
            build=build,
            # No `files`: the bytes are counted from the built module (the factors as converted and cast),
            # not the file's header, whose alphas, unread keys and fused-qkv layouts differ from it.
            dtype=dtype,
        )
    )


def patch_mode(mm: MemoryManager, handle: ModelHandle) -> str:
    """The policy's choice: fused while the model stays resident, on the fly when it comes and goes."""
    if handle.stream is not None or mm.policy.unloads_after_use:
        return "on_the_fly"
    return "fused"


def _resolve(model: torch.nn.Module, path: str) -> torch.nn.Module | None:
    """The layer at `path`, or None. CLIP keys may or may not carry `text_model.`: transformers 5 saves and
    builds CLIPTextModel without that level, older LoRA files (kohya, diffusers) always name it."""
    candidates = [path]
    if path.startswith("text_model."):
        candidates.append(path.removeprefix("text_model."))
    else:
        candidates.append("text_model." + path)
    for candidate in candidates:
        try:
            module = model.get_submodule(candidate)
        except AttributeError:
            continue
        if isinstance(module._parameters.get("weight"), torch.Tensor):
            return module
    return None


@dataclass(frozen=True)
class LoraMatch:
    applied: int
    unapplied: list[str]

    def check(self, label: str) -> None:
        """Raise when nothing matched; log a warning with counts when only part did."""
        if self.applied == 0 and self.unapplied:
            raise ValueError(
                f"LoRA {label}: none of its {len(self.unapplied)} layers match this model, e.g. "
                + ", ".join(self.unapplied[:_SAMPLE])
            )
        if self.unapplied:
            log.warning(
                "LoRA %s: %d layers applied, %d not (e.g. %s)",
                label,
                self.applied,
                len(self.unapplied),
                ", ".join(self.unapplied[:_SAMPLE]),
            )


def _delta_fn(w: LayerWeights, strength: float):
    def delta(weight: torch.Tensor) -> torch.Tensor:
        return w.delta(weight.shape) * strength

    return delta


def _layer_patches(
    model: torch.nn.Module, pairs: list[tuple[LoraPatch, dict[str, LayerWeights]]]
) -> tuple[dict[str, LayerPatch], LoraMatch]:
    layers: dict[str, LayerPatch] = {}
    applied, unapplied = 0, []
    for patch, weights in pairs:
        for path, w in weights.items():
            module = _resolve(model, path)
            weight = module._parameters["weight"] if module is not None else None
            # Wrong size (a LoRA for another model) or not a float weight (int8/fp8/GGUF-quantized layers are
            # not patched: adding a float delta would need a dequantize-requantize this module doesn't do).
            if (
                weight is None
                or weight.numel() not in (0, _numel(w, module))
                or not weight.is_floating_point()
            ):
                unapplied.append(path)
                continue
            layers.setdefault(path, LayerPatch(module, [])).deltas.append(_delta_fn(w, patch.strength))
            applied += 1
    return layers, LoraMatch(applied, unapplied)


def _numel(w: LayerWeights, module: torch.nn.Module) -> int:
    # The delta's element count, to refuse a LoRA made for another model size before it is applied.
    f = w.factors
    if w.kind == "loha":
        return f["w1a"].shape[0] * f["w1b"][0].numel()
    inner = f["down"][0].numel() if "mid" not in f else f["down"].shape[1] * f["mid"][0][0].numel()
    return f["up"].shape[0] * inner


def _active(patches: tuple[LoraPatch, ...], target: str) -> tuple[LoraPatch, ...]:
    # Strength 0 is no LoRA, bit for bit; a file known to have nothing for this model is skipped unread.
    return tuple(p for p in patches if p.strength != 0.0 and (not p.targets or target in p.targets))


def _place_loras(
    mm: MemoryManager, stack: ExitStack, active: tuple[LoraPatch, ...], family: str, config: dict[str, Any]
) -> list[LoraWeights]:
    """Place the LoRA weights before the model they patch, so a streaming plan for the model leaves room."""
    return [stack.enter_context(mm.use(lora_handle(mm, p, family, config))) for p in active]


def _sync(
    mm: MemoryManager,
    stack: ExitStack,
    model: torch.nn.Module,
    handle: ModelHandle,
    active: tuple[LoraPatch, ...],
    loras: list[LoraWeights],
    target: str,
) -> None:
    """Make `model` carry exactly the `active` patches for `target`, in the mode the policy chooses."""
    mode = patch_mode(mm, handle)
    signature = (target, mode, tuple((str(p.path), p.stamp, p.strength) for p in active))
    state = patch_state(model)
    if state is not None and state.signature == signature and mode == "fused":
        return  # still fused from an earlier run with the same LoRAs
    t0 = time.perf_counter()
    if state is not None:
        mm.unpatch(handle)
        mm.telemetry.emit(
            PatchEvent(handle.spec.name, "removed", len(state.layers), "", 0, time.perf_counter() - t0)
        )
    if not active:
        return
    t0 = time.perf_counter()
    layers, match = _layer_patches(
        model, [(p, lora.layers(target)) for p, lora in zip(active, loras, strict=True)]
    )
    if not layers and not match.unapplied:
        return  # these LoRAs have nothing for this model (e.g. a UNet-only LoRA on a text encoder)
    label = ", ".join(p.label for p in active)
    match.check(label)
    state = mm.patch(handle, layers, mode=mode, signature=signature)
    if mode == "on_the_fly":
        # The hooks read the LoRA factors, which the manager may move or drop after this use.
        stack.callback(mm.unpatch, handle)
    mm.telemetry.emit(
        PatchEvent(handle.spec.name, mode, len(layers), label, state.extra_bytes(), time.perf_counter() - t0)
    )


@contextmanager
def use_denoiser(
    mm: MemoryManager, ref: DenoiserRef, *, working_bytes: int = 0, working: Working | None = None
) -> Iterator[torch.nn.Module]:
    """`mm.use(ref.handle)` with the ref's LoRA patches on the placed model (working as `mm.use` takes it)."""
    active = _active(ref.patches, "denoiser")
    with ExitStack() as stack:
        loras = _place_loras(mm, stack, active, ref.family.name, ref.config)
        model = stack.enter_context(mm.use(ref.handle, working_bytes=working_bytes, working=working))
        _sync(mm, stack, model, ref.handle, active, loras, "denoiser")
        yield model


@contextmanager
def use_text_encoder(
    mm: MemoryManager,
    ref: TextEncoderRef,
    index: int,
    *,
    working_bytes: int = 0,
    working: Working | None = None,
) -> Iterator[torch.nn.Module]:
    """`mm.use(ref.handles[index])` with the ref's LoRA patches for that encoder on the placed model."""
    handle = ref.handles[index]
    target = _TEXT_TARGETS[index]
    active = _active(ref.patches, target)
    with ExitStack() as stack:
        loras = _place_loras(mm, stack, active, ref.family.name, {})
        model = stack.enter_context(mm.use(handle, working_bytes=working_bytes, working=working))
        _sync(mm, stack, model, handle, active, loras, target)
        yield model


def _denoiser_layers(ref: DenoiserRef) -> set[str]:
    """Module paths of the denoiser, from its config on the meta device (no weights read or allocated)."""
    with torch.device("meta"):
        model = ref.family.denoiser_class.from_config(ref.config)
    return {
        name for name, m in model.named_modules() if isinstance(m._parameters.get("weight"), torch.Tensor)
    }


def _header_layers(files: tuple[Path, ...]) -> set[str]:
    """Module paths with a weight as safetensors headers name them (no tensor read)."""
    from safetensors import safe_open

    names: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names.update(k.removesuffix(".weight") for k in f.keys() if k.endswith(".weight"))
    return names


def _text_layers(handle: ModelHandle) -> set[str] | None:
    """Module paths of a text encoder from its safetensors headers; None when they can't be read that way
    (a single-file checkpoint names them differently): then the check happens when it is placed."""
    if not handle.spec.files or handle.spec.prefixes:
        return None
    names = _header_layers(handle.spec.files)
    return names | {n.removeprefix("text_model.") for n in names}


def _match(lora: LoraFile, known: dict[str, set[str] | None]) -> tuple[int, list[str]]:
    """How many of the file's layers find their module in `known` (None: not checkable, counted as found),
    and the keys that find none."""
    applied, stray = 0, list(lora.unread)
    for target, layers in lora.targets.items():
        names = known.get(target, set())
        for module in layers:
            if names is None or module in names or module.removeprefix("text_model.") in names:
                applied += 1
            else:
                stray.append(f"{target}:{module}")
    return applied, stray


def check_lora(
    path: Path, denoiser: DenoiserRef, text_encoder: TextEncoderRef | None, *, allow_pickle: bool = False
) -> tuple[LoraFile, int, list[str]]:
    """Read `path` and match it against the models' layer names, before anything is placed (LoadLoRA).

    Returns the file, how many layers will apply and the keys that apply to nothing. Raises when none
    applies, with a sample of the keys.
    """
    lora = read_lora(path, denoiser.family.name, denoiser.config, allow_pickle=allow_pickle)
    # The denoiser's headers first: building its class on the meta device imports diffusers' model code
    # (seconds a plan need not spend). Headers can name modules with a prefix or in another layout, so
    # anything they leave unmatched is checked again against the model itself.
    known: dict[str, set[str] | None] = {"denoiser": _header_layers(denoiser.handle.spec.files)}
    if text_encoder is not None:
        for i, handle in enumerate(text_encoder.handles):
            known[_TEXT_TARGETS[i]] = _text_layers(handle)
    applied, stray = _match(lora, known)
    if any(s.startswith("denoiser:") for s in stray):
        known["denoiser"] = _denoiser_layers(denoiser)
        applied, stray = _match(lora, known)
    if applied == 0:
        sample = ", ".join(stray[:_SAMPLE]) or "(none)"
        raise ValueError(
            f"{path.name}: no LoRA layer in this file matches this {denoiser.family.title} model "
            f"({len(stray)} keys), e.g. {sample}"
        )
    return lora, applied, stray
