"""ComfyUI's Qwen3.5 text-encoder files (`models/text_encoders/qwen3.5_*.safetensors`) as the LLMs they are.

Lives here: `QWEN35_SIZES`, `open_qwen35`, `qwen35_fields`. Imports torch, transformers,
`memory`, `pipelines.diffusion` (the ComfyUI file readers: `comfy_layouts.common` / `variants` / `scaled_fp8` /
`text_encoders`' tokenizer source, `lazy_load`, `families`' error), `pipelines.quant.split`, `pipelines.paths`,
`pipelines.dtypes`, `pipelines.llm.hf_loader` and `pipelines.llm.vision`; never nodes/, app/ or Qt.

Qwen3.5 is a hybrid decoder (three Gated DeltaNet "linear attention" layers, then one gated full-attention
layer, repeated) with a Qwen3-VL-style vision tower. ComfyUI (comfy/text_encoders/qwen35.py) stores it in its
own names: the decoder as `model.embed_tokens` / `model.layers.N.{linear_attn,self_attn,mlp}.*` / `model.norm`,
the tower as `visual.*`, `lm_head` where the size has one (9B, 27B; 0.8B-4B tie it to the embedding). These are
transformers' `Qwen3_5ForConditionalGeneration` tensors under `model.language_model.` / `model.visual.`, the same
shapes and formulas (the (1 + w) RMSNorm, the conv1d, A_log / dt_bias), so a file is read as that class (or as
`Qwen3_5ForCausalLM` when it holds no tower), its size found by fitting its shapes to the shipped config folders
(`resources/configs/qwen3.5-*`). No diffusion family here encodes prompts with it: it serves TextGenerate only.
The released sizes' folders ship no tokenizer (Qwen3.5's 248k-token vocabulary, not Qwen3's): Load LLM says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from memory import MemoryManager, ModelHandle
from pipelines.diffusion.families import UnsupportedModelError
from pipelines.paths import RESOURCES_DIR

# Config folders under resources/configs/ (each `text_encoder/` config.json + preprocessor_config.json, the tiny
# one a tokenizer/ too); a fit is exact, so at most one fits and the order only decides speed.
QWEN35_SIZES: tuple[tuple[str, str], ...] = (
    ("qwen3.5-tiny", "Qwen3.5 (tiny demo)"),
    ("qwen3.5-4b", "Qwen3.5-4B"),
    ("qwen3.5-9b", "Qwen3.5-9B"),
)
# Hugging Face checkpoints carry a multi-token-prediction head ComfyUI's model has no use for.
_UNREAD = ("mtp.",)


def _module_name(name: str, vision: bool) -> str:
    """ComfyUI's (or Hugging Face's) name in the module's: `Qwen3_5ForConditionalGeneration` nests the decoder
    under `model.language_model.` and the tower under `model.visual.`; `Qwen3_5ForCausalLM` keeps `model.`."""
    if name.startswith("model.language_model."):
        name = "model." + name.removeprefix("model.language_model.")
    elif name.startswith("model.visual."):
        name = name.removeprefix("model.")
    if not vision:
        return name
    if name.startswith("visual."):
        return "model." + name
    if name.startswith("model."):
        return "model.language_model." + name.removeprefix("model.")
    return name


def _model_class(vision: bool) -> type:
    from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    return Qwen3_5ForConditionalGeneration if vision else Qwen3_5ForCausalLM


def open_qwen35(memory: MemoryManager, path: Path) -> tuple[ModelHandle, Path, bool, str]:
    """(handle, config folder, has its vision tower, size title) of a ComfyUI Qwen3.5 file: bf16 / fp16 / fp32,
    fp8-scaled or ComfyUI's `comfy_quant` forms (int8 ConvRot, NVFP4, MXFP8: read dequantized; another format
    is refused by `comfy_quant` naming it). Registered as the diffusion loaders register a text encoder file
    (`<file>#text_encoder@<dtype>`), built on first use."""
    from pipelines.diffusion.comfy_layouts.common import KeyMapTensors, aligned, converted_shapes, file_keys
    from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8
    from pipelines.diffusion.comfy_layouts.variants import fits, module_shapes
    from pipelines.diffusion.lazy_load import trace_conversion
    from pipelines.dtypes import dtype_for_device
    from pipelines.quant.split import module_factory, register_built

    keys = file_keys(path)
    vision = any(k.startswith(("visual.", "model.visual.")) for k in keys)
    cls = _model_class(vision)
    raw = trace_conversion(path, lambda s: dequantize_stubs(s) if is_scaled_fp8(list(s)) else dict(s))
    renamed = {_module_name(k, vision): r for k, r in raw.items() if not k.startswith(_UNREAD)}
    tried = []
    for name, title in QWEN35_SIZES:
        folder = RESOURCES_DIR / "configs" / name / "text_encoder"
        make = module_factory(cls, folder)
        shapes = module_shapes(make)
        # A tied head (4B) is the embedding: the file may leave `lm_head` out, and the build ties it again.
        if fits(converted_shapes(renamed), shapes, optional=("lm_head.",)):
            break
        tried.append(title)
    else:
        raise UnsupportedModelError(
            f"{path.name}: a Qwen3.5 file of no size shipped here (its shapes fit none of {', '.join(tried)})"
        )
    key_map = aligned(renamed, shapes)
    dtype = dtype_for_device("auto", memory.device, torch.bfloat16)
    handle = register_built(
        memory,
        origin=path,
        part="text_encoder",
        name="text_encoder",
        kind="text_encoder",
        make=make,
        tensors=lambda: KeyMapTensors(path, key_map),
        dtype=dtype,
        storage="",
        source=str(path),
    )
    return handle, folder, vision, title


def qwen35_fields(memory: MemoryManager, path: Path) -> dict[str, Any]:
    """The fields of the `LLMModel` of a ComfyUI Qwen3.5 file but its end tokens (`comfy_te.open_comfy_te_llm`
    adds them): the module is a transformers causal LM (logits from its own head), so no wrapper; a file with
    its tower takes pictures."""
    from transformers import AutoConfig

    from pipelines.diffusion.comfy_layouts.text_encoders import ShippedTokenizerSource
    from pipelines.llm.hf_loader import LLMFiles

    handle, folder, vision, title = open_qwen35(memory, path)
    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    source = ShippedTokenizerSource(folder.parent, "tokenizer", _model_class(vision))
    try:
        tokenizer = source.load()
    except FileNotFoundError as exc:
        raise UnsupportedModelError(
            f"{path.name}: {title} read, but no tokenizer is shipped for it and the file carries none (Qwen3.5's "
            "vocabulary is not Qwen3's); give Load LLM a transformers folder of the same model"
        ) from exc
    fields: dict[str, Any] = dict(
        files=LLMFiles(source=path, folder=folder, weight_files=(path,), from_gguf=False),
        handle=handle,
        tokenizer=tokenizer,
        config=config.get_text_config(),
        dtype=handle.spec.dtype or torch.float32,
    )
    if vision:
        from pipelines.llm.vision import load_image_processor

        fields |= dict(image_processor=load_image_processor(folder), vision_config=config)
    return fields
