"""ControlNet: load one lazily, attach it to conditioning, and compute its residuals inside the sampler.

Lives here: `ControlNetRef`, `ControlHint`, `load_controlnet`, `attach_control`, `ActiveControls`.
May import: stdlib, torch, diffusers, memory, pipelines.paths, pipelines.diffusion.values.

A ControlNet travels on the conditioning wire, as in ComfyUI: `ApplyControlNet` returns the positive (and
negative) conditioning with a `ControlHint` added, and several hints stack. The sampler holds every
ControlNet it needs through `mm.use(...)` next to the denoiser (under `sequential` both are loaded for the
loop and unloaded after it) and, at each step inside a hint's start..end range, adds its residuals to the
UNet's skip connections. The arithmetic is diffusers' `StableDiffusionControlNetPipeline`'s: the control
image in [0, 1], the same batch as the CFG-doubled latents, `conditioning_scale` = strength, and
`controlnet_keep` for the step range; several ControlNets are summed as `MultiControlNetModel` does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager, ModelHandle
from pipelines.diffusion.values import DEFAULT_VAE_SCALE, Conditioning
from pipelines.model_keys import component_keys, precision_label
from pipelines.paths import check_weights_format


@dataclass(frozen=True)
class ControlNetRef:
    handle: ModelHandle
    config: dict[str, Any]
    dtype: torch.dtype


@dataclass(frozen=True, eq=False)  # compared by identity: one hint may sit on positive and negative
class ControlHint:
    """One ControlNet applied to one conditioning: the control picture and when and how hard it steers."""

    controlnet: ControlNetRef
    image: torch.Tensor  # IMAGE (B, H, W, C) in [0, 1]
    strength: float = 1.0
    start: float = 0.0  # fraction of the steps
    end: float = 1.0


def load_controlnet(
    mm: MemoryManager,
    path: Path,
    dtype: torch.dtype,
    *,
    allow_pickle: bool = False,
) -> ControlNetRef:
    """A diffusers-format ControlNet: a folder with `config.json` and its weights (loads nothing now; the
    manager reports its bytes as `LoadProgress` when it is first used)."""
    folder = path if path.is_dir() else path.parent
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"field 'path': {path} is not a diffusers ControlNet (no config.json next to the weights)"
        )
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("_class_name") not in ("ControlNetModel", None):
        raise ValueError(f"field 'path': {folder} holds a {config.get('_class_name')}, not a ControlNetModel")
    files = tuple(sorted(folder.glob("*.safetensors")))
    if not files:
        pickles = tuple(sorted(folder.glob("*.bin")))
        for p in pickles:
            check_weights_format(p, allow_pickle=allow_pickle)
        if not pickles:
            raise FileNotFoundError(f"field 'path': {folder} has no weight file (*.safetensors)")

    def build() -> torch.nn.Module:
        from diffusers import ControlNetModel  # here: `app plan` registers the ControlNet without diffusers

        return ControlNetModel.from_pretrained(
            str(folder), dtype=dtype, local_files_only=True, use_safetensors=bool(files)
        )

    handle = mm.register(
        ComponentSpec(
            **component_keys(folder, "controlnet", precision_label(dtype), files).spec_fields(),
            name="controlnet",
            kind="controlnet",
            build=build,
            files=files,
            dtype=dtype,
        )
    )
    return ControlNetRef(handle=handle, config=config, dtype=dtype)


def attach_control(cond: Conditioning, hint: ControlHint) -> Conditioning:
    """The same conditioning with one more ControlNet hint (earlier hints stay: they stack)."""
    if not 0.0 <= hint.start < hint.end <= 1.0:
        raise ValueError(
            f"start_percent must be below end_percent, both in [0, 1] (got {hint.start}, {hint.end})"
        )
    return dataclasses.replace(cond, controls=(*cond.controls, hint))


def _control_image(
    hint: ControlHint, height: int, width: int, batch: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """As StableDiffusionControlNetPipeline.prepare_image: resized to the picture, [0, 1], one per latent."""
    # The pipeline's own processor settings: the hint is resized to the picture, so the factor only rounds.
    # here: `app plan` imports this module, not diffusers
    from diffusers.image_processor import VaeImageProcessor

    processor = VaeImageProcessor(vae_scale_factor=DEFAULT_VAE_SCALE, do_convert_rgb=True, do_normalize=False)
    image = processor.preprocess(hint.image.permute(0, 3, 1, 2), height=height, width=width).to(torch.float32)
    if image.shape[0] == 1:
        image = image.repeat_interleave(batch, dim=0)
    return image.to(device=device, dtype=dtype)


class ActiveControls:
    """The ControlNets one sampling loop uses: held on the device for the loop, asked once per step.

    `halves` says, for the CFG-doubled batch [negative, positive], which halves each hint applies to: a hint
    on both conditionings acts on the whole batch (what diffusers does); a hint only on the positive leaves
    the negative half's residuals at zero."""

    def __init__(
        self,
        mm: MemoryManager,
        positive: Conditioning,
        negative: Conditioning | None,
        *,
        do_cfg: bool,
        batch: int,
        height: int,
        width: int,
        dtype: torch.dtype,
    ) -> None:
        self.mm = mm
        self.do_cfg = do_cfg
        on_positive: list[ControlHint] = list(positive.controls)
        on_negative = list(negative.controls) if (negative is not None and do_cfg) else []
        self.entries: list[tuple[ControlHint, torch.Tensor, torch.Tensor]] = []
        for hint in on_positive + [h for h in on_negative if not _has(on_positive, h)]:
            halves = [_has(on_negative, hint), _has(on_positive, hint)] if do_cfg else [True]
            image = _control_image(hint, height, width, batch, mm.device, dtype)
            image = torch.cat([image] * 2) if do_cfg else image
            weight = torch.tensor([h for h in halves for _ in range(batch)], dtype=dtype, device=mm.device)
            self.entries.append((hint, image, weight))
        self._stack = ExitStack()
        self._modules: list[torch.nn.Module] = []

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __enter__(self) -> ActiveControls:
        for hint, _, _ in self.entries:
            self._modules.append(self._stack.enter_context(self.mm.use(hint.controlnet.handle)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._modules.clear()

    def residuals(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        embeds: torch.Tensor,
        step: int,
        total: int,
        added_cond_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """UNet keyword arguments for this step: summed down/mid residuals of every hint in range."""
        down: Sequence[torch.Tensor] | None = None
        mid: torch.Tensor | None = None
        for (hint, image, weight), model in zip(self.entries, self._modules, strict=True):
            # diffusers' controlnet_keep: off before `start` and after `end` (fractions of the steps).
            if step / total < hint.start or (step + 1) / total > hint.end:
                continue
            d, m = model(
                x,
                t,
                encoder_hidden_states=embeds,
                controlnet_cond=image,
                conditioning_scale=hint.strength,
                added_cond_kwargs=added_cond_kwargs,
                return_dict=False,
            )
            if not bool((weight == 1).all()):
                shape = (-1, 1, 1, 1)
                d = [r * weight.view(shape) for r in d]
                m = m * weight.view(shape)
            down = list(d) if down is None else [a + b for a, b in zip(down, d, strict=True)]
            mid = m if mid is None else mid + m
        if down is None:
            return {}
        return {"down_block_additional_residuals": down, "mid_block_additional_residual": mid}


def _has(hints: list[ControlHint], hint: ControlHint) -> bool:
    return any(h is hint for h in hints)
