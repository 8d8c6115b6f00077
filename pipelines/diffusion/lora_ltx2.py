"""LTX-2 LoRA files in ComfyUI's (Lightricks') names, read onto diffusers' `LTX2VideoTransformer3DModel`.

Lives here: `is_comfy_ltx2_lora`, `ltx2_lora_state`, `ltx2_lora_to_comfy`. May import: stdlib, torch,
pipelines.diffusion.comfy_layouts.ltx2 (the checkpoint's transformer names).

The LoRAs a ComfyUI user loads on LTX-2 (the LTX-2.3 templates' distilled LoRA, Lightricks' camera and IC
LoRAs) name the transformer's layers as its one-file checkpoint does, under `diffusion_model.`
(`patchify_proj`, `adaln_single`, `av_ca_*_adaln_single`, `prompt_adaln_single`, blocks'
`attn1.to_q` ...), with PEFT's `lora_A` / `lora_B` factors or kohya's `lora_down` / `lora_up` (+ `alpha`).
The module names go through the same rename as the checkpoint's weights (`part_to_diffusers`), so a LoRA
lands on the layer the checkpoint's weight of that name was loaded into. The result is a diffusers/PEFT
state dict (`transformer.<module>.lora_A.weight`, `.alpha`) for `lora_formats._read_peft`;
`ltx2_lora_to_comfy` is the inverse (to write fixtures). Keys of the text
projection / connectors (`text_embedding_projection.*`, the connectors under `diffusion_model.`) name no
transformer layer: they stay unread, and the LoRA loader counts them.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pipelines.diffusion.comfy_layouts.ltx2 import DIT, part_from_diffusers, part_to_diffusers

_PREFIX = "diffusion_model."
_PARTS = {  # factor suffix -> PEFT's
    ".lora_A.weight": ".lora_A.weight",
    ".lora_B.weight": ".lora_B.weight",
    ".lora_down.weight": ".lora_A.weight",
    ".lora_up.weight": ".lora_B.weight",
    ".alpha": ".alpha",
}
_CONNECTORS = ("video_embeddings_connector.", "audio_embeddings_connector.")


def is_comfy_ltx2_lora(keys: list[str] | Mapping[str, object]) -> bool:
    """Whether a LoRA names LTX-2's layers in ComfyUI's checkpoint names (`diffusion_model.` + a factor)."""
    return any(k.startswith(_PREFIX) and k.endswith(tuple(_PARTS)) for k in keys)


def _split(key: str) -> tuple[str, str] | None:
    for suffix, peft in _PARTS.items():
        if key.endswith(suffix):
            return key.removesuffix(suffix), peft
    return None


def ltx2_lora_state(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """(the LoRA as diffusers/PEFT keys on the transformer, the keys left unread)."""
    modules: dict[str, list[tuple[str, str]]] = {}  # checkpoint module -> [(file key, PEFT suffix)]
    unread: list[str] = []
    for key in state:
        found = _split(key) if key.startswith(_PREFIX) else None
        if found is None or found[0].removeprefix(_PREFIX).startswith(_CONNECTORS):
            unread.append(key)
            continue
        modules.setdefault(found[0].removeprefix(_PREFIX), []).append((key, found[1]))
    # Each module's name as the checkpoint's weight of that name is renamed (stub tensors: names only).
    stub = torch.empty(0)
    renamed = {}
    for module in modules:
        (name,) = part_to_diffusers("transformer", {f"{DIT}{module}.weight": stub})
        renamed[module] = name.removesuffix(".weight")
    out: dict[str, torch.Tensor] = {}
    for module, parts in modules.items():
        for key, suffix in parts:
            out[f"transformer.{renamed[module]}{suffix}"] = state[key]
    return out, unread


def ltx2_lora_to_comfy(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers/PEFT LoRA of the transformer (`transformer.<module>.lora_A.weight`) in ComfyUI's names."""
    out: dict[str, torch.Tensor] = {}
    stub = torch.empty(0)
    for key, t in state.items():
        found = _split(key.removeprefix("transformer."))
        if found is None:
            raise ValueError(f"{key}: not a diffusers LoRA key of the transformer")
        (name,) = part_from_diffusers("transformer", {f"{found[0]}.weight": stub})
        out[_PREFIX + name.removeprefix(DIT).removesuffix(".weight") + found[1]] = t
    return out
