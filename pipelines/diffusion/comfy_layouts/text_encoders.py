"""ComfyUI's text encoder files (`models/text_encoders/`): Qwen3, Qwen2.5-VL, Mistral, UMT5.

Lives here: `TEXT_ENCODER_FAMILIES`, `text_encoder_kind`, `load_comfy_text_encoder`, `ShippedTokenizerSource`.
May import: stdlib, torch, transformers, memory, pipelines.diffusion, pipelines.quant.

ComfyUI repackages each LLM text encoder as one file in the LLM's own names (`model.layers.*`; Qwen2.5-VL's
vision tower as `visual.*`; Mistral for FLUX.2 without its vision tower; UMT5 in T5's names without the tied
`encoder.embed_tokens`). The file's shapes pick the family and size among the shipped config folders; the
tokenizer is the config folder's (a file carries none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from memory import MemoryManager
from pipelines.diffusion.assembly import resolve_precision, text_encoder_ref
from pipelines.diffusion.comfy_layouts.common import (
    KeyMapTensors,
    aligned,
    converted_shapes,
    file_form,
    file_keys,
)
from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    fits,
    folder_of,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError
from pipelines.diffusion.lazy_load import Recipe, trace_conversion
from pipelines.diffusion.values import TextEncoderRef, TokenizerSource

# --- text encoders ------------------------------------------------------------------------------------

# Which families a text encoder kind serves (ComfyUI's CLIPLoader type: lumina2 / flux2 -> Qwen3,
# qwen_image -> Qwen2.5-VL, flux2 -> Mistral, wan -> UMT5).
TEXT_ENCODER_FAMILIES: dict[str, tuple[str, ...]] = {
    "qwen3": ("zimage", "flux2_klein"),
    "qwen2.5-vl": ("qwenimage", "qwenimage_edit"),
    "qwen3-vl": ("qwenimage21", "krea2", "flux3", "minimax"),
    "mistral": ("flux2_dev",),
    "umt5": ("wan",),
}
_FLUX2 = ("flux2_klein", "flux2_dev")
# Parts of a text encoder's module a file may leave out: Mistral's vision tower (FLUX.2 prompts are text),
# filled with zeros, and a head or table tied to the embedding (LLM `lm_head`, T5's `encoder.embed_tokens`:
# tied again when the module is built).
_OPTIONAL = ("model.vision_tower.", "model.multi_modal_projector.")
_MAY_MISS = (*_OPTIONAL, "lm_head.", "encoder.embed_tokens.")
# MiniMax H3 reads a hidden state, never logits nor the final norm's output: ComfyUI's Qwen3-VL-32B file stops
# after layer 50 with no lm_head (and maybe no final norm); zeros stand in for what it leaves out.
_MINIMAX_UNREAD = ("lm_head.", "model.language_model.norm.")


def text_encoder_kind(keys: list[str]) -> str | None:
    """ "qwen3", "qwen2.5-vl", "qwen3-vl", "qwen3.5", "mistral" or "umt5" from a text encoder file's names; None
    otherwise. Qwen3.5 first: its full-attention layers have Qwen3's q_norm and its tower Qwen3-VL's names."""
    if any(".linear_attn.in_proj_qkv." in k for k in keys):
        return "qwen3.5"  # Gated DeltaNet layers (pipelines.llm.comfy_qwen35 reads the file, for Load LLM)
    if any(k.startswith(("visual.", "model.visual.")) for k in keys):
        return "qwen3-vl" if any(".self_attn.q_norm." in k for k in keys) else "qwen2.5-vl"
    if any(".self_attn.q_norm." in k for k in keys):
        return "qwen3"
    if any("encoder.block.1.layer.0.SelfAttention.relative_attention_bias" in k for k in keys):
        return "umt5"  # T5 has the relative attention bias in block 0 only; UMT5 in every block
    if any(".self_attn.q_proj." in k for k in keys) and not any(".self_attn.q_proj.bias" in k for k in keys):
        return "mistral"  # Llama-shaped, no q/k/v biases (Qwen2 has them)
    return None


def _text_encoder_names(name: str, class_name: str) -> str:
    """A ComfyUI text encoder name in the module's names (VLMs nest the LLM under `model.language_model.`)."""
    if class_name in (
        "Qwen2_5_VLForConditionalGeneration",
        "Mistral3ForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
    ):
        if name.startswith("visual."):
            return "model.visual." + name.removeprefix("visual.")
        if name.startswith("model.") and not name.startswith(
            ("model.language_model.", "model.visual.", "model.vision_tower.", "model.multi_modal_projector.")
        ):
            return "model.language_model." + name.removeprefix("model.")
    if class_name == "Qwen3VLModel" and name.startswith("model."):  # Krea 2's: no head, no `model.` level
        return "language_model." + name.removeprefix("model.")
    return name


class ShippedTokenizerSource(TokenizerSource):
    """The tokenizer of the config folder; a text encoder file carries none, so say where to put one."""

    def load(self) -> Any:
        if not (self.path / self.subfolder).is_dir():
            raise FileNotFoundError(
                f"no tokenizer in {self.path / self.subfolder}: a ComfyUI text encoder file carries none. Give "
                "field 'config_dir' a diffusers folder of the model (its tokenizer/ is enough)"
            )
        return super().load()


def load_comfy_text_encoder(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
) -> tuple[TextEncoderRef, str]:
    """A Qwen3 / Qwen2.5-VL / Qwen3-VL / Mistral / UMT5 file (`models/text_encoders/`), bf16, fp8-scaled or
    in ComfyUI's other quantized layouts (int8 ConvRot, NVFP4, ...: read dequantized, `comfy_quant`)."""
    from pipelines.quant.split import module_factory, register_built

    keys = file_keys(path)
    kind = text_encoder_kind(keys)
    if kind is None:
        raise UnsupportedModelError(f"{path.name}: not a Qwen3, Qwen2.5-VL, Mistral or UMT5 text encoder")
    if kind not in TEXT_ENCODER_FAMILIES:  # Qwen3.5: an LLM for TextGenerate (Load LLM reads it)
        raise UnsupportedModelError(
            f"{path.name}: a {kind} LLM, which no image or video model here encodes prompts with; Load LLM reads "
            "it (ComfyUI's TextGenerate)"
        )
    families = TEXT_ENCODER_FAMILIES[kind]
    if family in _FLUX2 and set(families) <= set(_FLUX2):
        family = families[0]  # ComfyUI's CLIPLoader type "flux2": the file says which (Qwen3 / Mistral)
    if family != "auto":
        if family not in families:
            served = ", ".join(FAMILIES[f].title for f in families)
            raise UnsupportedModelError(
                f"field 'family' says {FAMILIES[family].title}, but {path.name} is a {kind} text encoder ({served})"
            )
        families = (family,)

    def class_of(v: Variant) -> type:
        return FAMILIES[v.family].text_encoders[0].model_class

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        slot = FAMILIES[v.family].text_encoders[0]
        return module_shapes(module_factory(slot.model_class, folder_of(v) / slot.subfolder))

    raw = trace_conversion(path, lambda s: dequantize_stubs(s) if is_scaled_fp8(list(s)) else dict(s))
    candidates = variants_for(families, config_dir)
    fitting = []
    for v in candidates:
        if any(f.family == v.family for f in fitting):
            continue  # one size per family fits (the fit is exact): the next family may fit too
        renamed = {_text_encoder_names(k, class_of(v).__name__): r for k, r in raw.items()}
        unread = _MINIMAX_UNREAD if v.family == "minimax" else ()
        if fits(converted_shapes(renamed), wanted(v), optional=(*_MAY_MISS, *unread)):
            fitting.append(v)
    if not fitting:
        pick_variant(candidates, {}, wanted, what=f"{kind} text encoder", file_name=path.name)  # raises
    if len({v.family for v in fitting}) > 1:
        both = " and ".join(FAMILIES[v.family].title for v in fitting)
        raise UnsupportedModelError(
            f"{path.name}: this {kind} text encoder serves {both}; field 'family': pick one "
            f"({', '.join(v.family for v in fitting)})"
        )
    variant = fitting[0]
    fam = FAMILIES[variant.family]
    slot = fam.text_encoders[0]
    folder = folder_of(variant)
    make = module_factory(slot.model_class, folder / slot.subfolder)
    shapes = module_shapes(make)
    key_map = aligned({_text_encoder_names(k, slot.model_class.__name__): r for k, r in raw.items()}, shapes)
    optional = (*_OPTIONAL, *_MINIMAX_UNREAD) if variant.family == "minimax" else _OPTIONAL
    missing = [n for n in shapes if n not in key_map and n.startswith(optional)]
    for name in missing:  # left out of the file (never used for text prompts): zeros stand in
        key_map[name] = Recipe((), ("const", torch.zeros(shapes[name])), shapes[name], torch.float32)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    handle = register_built(
        mm,
        origin=path,
        part=slot.subfolder,
        name=slot.subfolder,
        kind="text_encoder",
        make=make,
        tensors=lambda: KeyMapTensors(path, key_map),
        dtype=torch_dtype,
        storage=storage,
        source=str(path),
    )
    form = file_form(path)
    message = f"{path.name}: {kind} text encoder for {fam.title} ({form}), config: {variant.title}"
    if any(n.startswith(_OPTIONAL) for n in missing):
        message += " (no vision tower in the file: text prompts only)"
    tokenizer = ShippedTokenizerSource(folder, slot.tokenizer_subfolder, slot.model_class)
    return text_encoder_ref([handle], [tokenizer], fam, torch_dtype), message
