"""Reading LoRA files: kohya/A1111, diffusers/PEFT, LyCORIS LoCon and LoHa, and the Flux/SD3/LTX-2 layouts.

Lives here: `LayerWeights`, `LoraFile`, `read_lora`, `LORA_TARGETS`.
May import: stdlib, torch, safetensors, diffusers (its LoRA conversion utilities), pipelines.diffusion.families,
pipelines.diffusion.lora_ltx2 (ComfyUI's LTX-2 names), pipelines.weight_format.

The file's format is decided by its content, through the gate every loader passes (`check_weights_format`):
safetensors, or a pickle only when the user allowed pickles.

Every layout ends as the same thing: for each target model ("denoiser", "text_encoder", "text_encoder_2",
"text_encoder_3"), a dict from a module path in the diffusers/transformers model to the factors of its
delta (`LayerWeights`). Where diffusers has a converter we call it:

- kohya Flux (`lora_unet_double_blocks_*`): `_convert_kohya_flux_lora_to_diffusers`; other Flux layouts
  (XLabs, BFL, fal): `FluxLoraLoaderMixin.lora_state_dict`; SD3: `SD3LoraLoaderMixin.lora_state_dict`.
- kohya SD1.x/SDXL names: `_maybe_map_sgm_blocks_to_diffusers` (SDXL's sgm block numbering), then
  `_convert_unet_lora_key` / `_convert_text_encoder_lora_key` for each layer name, then diffusers' own
  rename tables (`UNET_TO_DIFFUSERS`, `DIFFUSERS_OLD_TO_PEFT`) to reach the PEFT module path.

We group kohya keys by layer ourselves (rather than calling `_convert_non_diffusers_lora_to_diffusers` on the
whole file) because that function only knows `lora_down`/`lora_up` pairs and raises on LyCORIS keys
(`hada_w1_a`, `lora_mid`) and on any key it did not expect; grouping per layer lets one converter name the
module while our `LayerWeights` does the arithmetic for every variant, and lets a partly-understood file
load with a count of what was left out instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipelines.diffusion.families import FAMILIES
from pipelines.weight_format import WeightFormat, check_weights_format, load_pickle_state_dict

LORA_TARGETS = ("denoiser", "text_encoder", "text_encoder_2", "text_encoder_3")
_PREFIX_TARGET = {
    "unet": "denoiser",
    "transformer": "denoiser",
    "text_encoder": "text_encoder",
    "text_encoder_2": "text_encoder_2",
    "text_encoder_3": "text_encoder_3",
}
_KOHYA_TE = (("lora_te1_", "text_encoder"), ("lora_te2_", "text_encoder_2"), ("lora_te_", "text_encoder"))
# LyCORIS/kohya per-layer tensor names -> our factor names.
_KOHYA_PARTS = {
    "lora_down.weight": "down",
    "lora_up.weight": "up",
    "lora_mid.weight": "mid",
    "hada_w1_a": "w1a",
    "hada_w1_b": "w1b",
    "hada_w2_a": "w2a",
    "hada_w2_b": "w2b",
    "alpha": "alpha",
}


@dataclass
class LayerWeights:
    """The factors of one layer's delta. kind "lora": up @ (mid) @ down; "loha": (w1a @ w1b) * (w2a @ w2b)."""

    kind: str
    factors: dict[str, torch.Tensor]
    alpha: float | None = None

    @property
    def rank(self) -> int:
        return int(self.factors["down" if self.kind == "lora" else "w1b"].shape[0])

    @property
    def scale(self) -> float:
        # kohya/LyCORIS: the delta is scaled by alpha / rank; no alpha means 1 (PEFT files, baked alphas).
        return 1.0 if self.alpha is None else self.alpha / self.rank

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.factors.values())

    def delta(self, shape: torch.Size) -> torch.Tensor:
        """The full-size delta for a weight of `shape`, in float32, alpha/rank applied (strength not)."""
        f = {k: v.float() for k, v in self.factors.items()}
        if self.kind == "loha":
            d = (f["w1a"] @ f["w1b"]) * (f["w2a"] @ f["w2b"])  # (out, in * kh * kw)
        elif "mid" in f:
            # LoCon with CP/Tucker decomposition (as ComfyUI rebuilds it): down (r, in, 1, 1), mid (r, r, kh, kw).
            down, mid = f["down"], f["mid"]
            core = torch.mm(down.transpose(0, 1).flatten(1), mid.transpose(0, 1).flatten(1))  # (in, r*kh*kw)
            core = core.reshape(down.shape[1], down.shape[0], *mid.shape[2:]).transpose(
                0, 1
            )  # (r, in, kh, kw)
            d = f["up"].flatten(1) @ core.flatten(1)
        else:
            d = f["up"].flatten(1) @ f["down"].flatten(1)  # (out, r) @ (r, in * kh * kw)
        return (d * self.scale).reshape(shape)


@dataclass
class LoraFile:
    """A LoRA file's layers per target, plus the keys that could not be read as any layer."""

    path: Path
    layout: str  # "kohya", "peft", "flux", "sd3"
    targets: dict[str, dict[str, LayerWeights]] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)

    def layer_count(self) -> int:
        return sum(len(layers) for layers in self.targets.values())

    def nbytes(self) -> int:
        return sum(w.nbytes() for layers in self.targets.values() for w in layers.values())


def _load_state_dict(path: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    fmt = check_weights_format(path, allow_pickle=allow_pickle)  # a pickle without opt-in: refused here
    if fmt == WeightFormat.SAFETENSORS:
        return load_file(str(path))
    if fmt == WeightFormat.GGUF:
        raise ValueError(f"{path.name}: a GGUF file; LoRAs are read from .safetensors files")
    return load_pickle_state_dict(path, allow_pickle=allow_pickle)


def read_lora(
    path: Path, family: str, denoiser_config: dict[str, Any] | None = None, *, allow_pickle: bool = False
) -> LoraFile:
    """Read a LoRA file for a model of `family` ("sd", "sdxl", "sd3", "flux", ...)."""
    state_dict = _load_state_dict(Path(path), allow_pickle)
    if not state_dict:
        raise ValueError(f"{path}: the file holds no tensors")
    kohya = any(k.startswith(("lora_unet_", "lora_te")) for k in state_dict)
    layout = FAMILIES[family].lora_layout if family in FAMILIES else "standard"
    if layout == "flux":
        return _read_flux(path, state_dict, kohya)
    if layout == "ltx2":
        return _read_ltx2(path, state_dict)
    if layout == "sd3" and not kohya:
        from diffusers.loaders.lora_pipeline import SD3LoraLoaderMixin

        converted = SD3LoraLoaderMixin.lora_state_dict(dict(state_dict))
        return _read_peft(path, converted, "sd3")
    if kohya:
        return _read_kohya(path, state_dict, denoiser_config)
    return _read_peft(path, state_dict, "peft")


def _read_flux(path: Path, state_dict: dict[str, torch.Tensor], kohya: bool) -> LoraFile:
    from diffusers.loaders.lora_conversion_utils import _convert_kohya_flux_lora_to_diffusers
    from diffusers.loaders.lora_pipeline import FluxLoraLoaderMixin

    if kohya:
        # Splits fused qkv into to_q/to_k/to_v and bakes alpha / rank into the factors.
        converted = _convert_kohya_flux_lora_to_diffusers(dict(state_dict))
        return _read_peft(path, converted, "flux")
    if any(".lora_A." in k or ".lora_B." in k for k in state_dict) and all(
        k.startswith(("transformer.", "text_encoder.")) for k in state_dict
    ):
        return _read_peft(path, state_dict, "peft")
    converted, alphas = FluxLoraLoaderMixin.lora_state_dict(dict(state_dict), return_alphas=True)
    return _read_peft(path, {**converted, **(alphas or {})}, "flux")


def _read_ltx2(path: Path, state_dict: dict[str, torch.Tensor]) -> LoraFile:
    from pipelines.diffusion.lora_ltx2 import is_comfy_ltx2_lora, ltx2_lora_state

    if not is_comfy_ltx2_lora(state_dict):  # a diffusers/PEFT LTX-2 LoRA (`transformer.*`)
        return _read_peft(path, state_dict, "peft")
    converted, unread = ltx2_lora_state(state_dict)
    out = _read_peft(path, converted, "comfy-ltx2")
    out.unread.extend(unread)
    return out


def _peft_module(key: str, target: str) -> tuple[str, str] | None:
    """(module path, part) for a diffusers/PEFT key without its target prefix; None if it is no LoRA key."""
    if ".lora_A." not in key and ".lora_B." not in key:
        # Old diffusers attention-processor names: "attn1.processor.to_q_lora.down.weight" ->
        # "attn1.to_q.lora_A". A PEFT key is already new; importing diffusers' tables for it would cost a
        # plan seconds of diffusers.utils (torch._dynamo, peft).
        from diffusers.utils.state_dict_utils import DIFFUSERS_OLD_TO_PEFT, UNET_TO_DIFFUSERS

        key = key.replace(".processor.", ".")
        table = UNET_TO_DIFFUSERS if target == "denoiser" else DIFFUSERS_OLD_TO_PEFT
        for old, new in table.items():
            if old in key:
                key = key.replace(old, new)
                break
    for marker, part in (
        (".lora_A.", "down"),
        (".lora_B.", "up"),
        (".lora.down.", "down"),
        (".lora.up.", "up"),
    ):
        if marker in key:
            return key.split(marker)[0], part
    if key.endswith(".alpha"):
        return key.removesuffix(".alpha"), "alpha"
    return None


def _read_peft(path: Path, state_dict: dict[str, Any], layout: str) -> LoraFile:
    out = LoraFile(path, layout)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in state_dict.items():
        head, _, rest = key.partition(".")
        target = _PREFIX_TARGET.get(head)
        if target is None:  # a bare diffusers key ("down_blocks.0....lora_A.weight"): the denoiser's
            target, rest = "denoiser", key
        found = _peft_module(rest, target)
        if found is None:
            out.unread.append(key)
            continue
        module, part = found
        groups.setdefault((target, module), {})[part] = value
    for (target, module), parts in groups.items():
        if "down" not in parts or "up" not in parts:
            out.unread.extend(f"{target}:{module}.{p}" for p in parts)
            continue
        alpha = parts.get("alpha")
        out.targets.setdefault(target, {})[module] = LayerWeights(
            "lora",
            {"down": parts["down"], "up": parts["up"]},
            float(alpha) if alpha is not None else None,
        )
    return out


def _kohya_module(name: str) -> tuple[str, str] | None:
    """(target, module path) for a kohya layer name such as "lora_unet_mid_block_attentions_0_proj_in"."""
    from diffusers.loaders.lora_conversion_utils import (
        _convert_text_encoder_lora_key,
        _convert_unet_lora_key,
    )

    fake = name + ".lora_down.weight"  # the converters rename whole keys; we only want the layer part
    if name.startswith("lora_unet_"):
        found = _peft_module(_convert_unet_lora_key(fake), "denoiser")
        return ("denoiser", found[0]) if found else None
    for prefix, target in _KOHYA_TE:
        if name.startswith(prefix):
            found = _peft_module(_convert_text_encoder_lora_key(fake, name), target)
            return (target, found[0]) if found else None
    return None


def _read_kohya(
    path: Path, state_dict: dict[str, torch.Tensor], denoiser_config: dict[str, Any] | None
) -> LoraFile:
    from diffusers.loaders.lora_conversion_utils import _maybe_map_sgm_blocks_to_diffusers

    if denoiser_config is not None and "layers_per_block" in denoiser_config:
        # SDXL kohya files number UNet blocks the sgm way (input_blocks_4_1); diffusers renumbers them.
        state_dict = _maybe_map_sgm_blocks_to_diffusers(dict(state_dict), denoiser_config)
    out = LoraFile(path, "kohya")
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        name, _, part = key.partition(".")
        if part not in _KOHYA_PARTS:
            out.unread.append(key)  # dora_scale, LoKr, Tucker LoHa (hada_t1): not supported
            continue
        groups.setdefault(name, {})[_KOHYA_PARTS[part]] = value
    for name, parts in groups.items():
        kind = "loha" if "w1a" in parts else "lora"
        need = ("w1a", "w1b", "w2a", "w2b") if kind == "loha" else ("down", "up")
        found = _kohya_module(name)
        if found is None or not all(p in parts for p in need):
            out.unread.extend(f"{name}.{p}" for p in parts)
            continue
        target, module = found
        alpha = parts.pop("alpha", None)
        out.targets.setdefault(target, {})[module] = LayerWeights(
            kind, parts, float(alpha) if alpha is not None else None
        )
    return out
