"""Loading ComfyUI's transformer files (`models/diffusion_models/`) of Z-Image, Qwen-Image, FLUX.2, Wan and the
families with a module of their own (Qwen-Image 2.1: `qwen21`; MiniMax H3: `minimax`, `minimax_load`).

Lives here: `denoiser_layout`, `load_comfy_denoiser`. May import: stdlib, torch, safetensors, diffusers, memory,
pipelines.diffusion, pipelines.quant. (Text encoders: `text_encoders`; VAEs: `vaes`.)

The loader reads the header only (ComfyUI's quantized layers come dequantized: `comfy_quant`), converts the
names (`keys`, `scaled_fp8`) into a key map of recipes
(`lazy_load.trace_conversion` on header stubs), picks the config folder the shapes fit (`variants`) and
registers a lazy handle. A plain file is registered with a `CheckpointSource`: the memory manager fills it
tensor by tensor, or streams its blocks from the file, as single-file checkpoints are. With an 8-bit storage
choice or a GGUF file, the handle is built by `meta_load.build_from_tensors`, tensor by tensor from the
memory-mapped file (GGUF blocks stay quantized, `storage="gguf"`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager
from pipelines.diffusion.assembly import (
    component_keys_for,
    denoiser_ref,
    resolve_precision,
)
from pipelines.diffusion.comfy_layouts import krea2, minimax, minimax_load, qwen21
from pipelines.diffusion.comfy_layouts.common import (
    KeyMapTensors,
    config_of,
    converted_shapes,
    file_form,
    file_key_map,
    file_keys,
)
from pipelines.diffusion.comfy_layouts.flux3_keys import is_flux3_transformer
from pipelines.diffusion.comfy_layouts.keys import (
    LAYOUTS,
    strip_prefix,
    transformer_to_diffusers,
)
from pipelines.diffusion.comfy_layouts.variants import (
    Variant,
    folder_of,
    module_shapes,
    pick_variant,
    variants_for,
)
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError, denoiser_stream_blocks
from pipelines.diffusion.lazy_load import (
    KeyMap,
    empty_module,
)
from pipelines.diffusion.values import DenoiserRef


def denoiser_layout(keys: list[str]) -> tuple[str, str] | None:
    """(family, "comfy" | "diffusers") of a 2026-family transformer file from its names; None otherwise."""
    names = set(strip_prefix(dict.fromkeys(keys)))

    def has(prefix: str) -> bool:
        return any(k.startswith(prefix) for k in names)

    if (minimax_names := minimax.transformer_names(keys)) is not None:
        return "minimax", minimax_names
    if is_flux3_transformer(names):
        return is_flux3_transformer(names)
    if krea2.is_krea2_transformer(names):
        return krea2.is_krea2_transformer(names)
    if has("noise_refiner.") and has("context_refiner."):
        return "zimage", "diffusers" if has("all_x_embedder.") else "comfy"
    if has("double_stream_modulation_img."):
        family = (
            "flux2_dev"
            if has("guidance_in.") or has("time_guidance_embed.guidance_embedder.")
            else "flux2_klein"
        )
        return family, "diffusers" if has("transformer_blocks.") else "comfy"
    if has("txt_in.text_norm.") and has("transformer_blocks."):  # Qwen-Image 2.1: gate and up fused or not
        return "qwenimage21", "comfy" if any(".img_mlp.gate_up." in k for k in names) else "diffusers"
    if has("txt_norm.") and has("img_in.") and has("transformer_blocks."):
        return "qwenimage", "comfy"  # ComfyUI's Qwen-Image names are diffusers'
    if has("blocks.") and (has("head.modulation") or has("condition_embedder.")):
        return "wan", "diffusers" if has("condition_embedder.") else "comfy"
    return None


def load_comfy_denoiser(
    mm: MemoryManager,
    path: Path,
    *,
    family: str = "auto",
    dtype: str = "auto",
    config_dir: Path | None = None,
    scheduler_config: dict[str, Any] | None = None,
) -> tuple[DenoiserRef, str]:
    """A Z-Image / Qwen-Image / FLUX.2 / Wan transformer file (`models/diffusion_models/`): bf16 or fp8-scaled
    `.safetensors` in ComfyUI's (or diffusers') names, or a `.gguf` kept quantized."""
    is_gguf = path.suffix.lower() == ".gguf"
    if is_gguf:
        from pipelines.quant.gguf_files import gguf_shapes

        keys = list(gguf_shapes(path))
    else:
        keys = file_keys(path)
    found = denoiser_layout(keys)
    if found is None:
        raise UnsupportedModelError(f"{path.name}: not a Z-Image, Qwen-Image, FLUX.2 or Wan transformer")
    detected, names = found
    if family == "qwenimage_edit" and detected == "qwenimage":
        detected = (
            family  # an edit model's file has Qwen-Image's tensors: the loader's family tells them apart
        )
    if family not in ("auto", detected):
        raise UnsupportedModelError(
            f"field 'family' says {FAMILIES[family].title}, but {path.name} is a {FAMILIES[detected].title} transformer"
        )
    fam = FAMILIES[detected]
    # MiniMax H3's pruned files fill diffusers' module with the curve form's time embedding
    build = minimax_load.denoiser_builder(path) if detected == "minimax" else fam.denoiser_class.from_config
    layout = LAYOUTS[detected] if names == "comfy" else "qwenimage"  # "qwenimage": names kept as they are

    def convert(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return transformer_to_diffusers(layout, state)

    if is_gguf:
        from pipelines.quant.gguf_files import gguf_tensors

        gguf_state = convert(gguf_tensors(path))
        shapes = {k: tuple(getattr(t, "quant_shape", t.shape)) for k, t in gguf_state.items()}
    else:
        key_map = file_key_map(path, convert)
        shapes = converted_shapes(key_map)

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        config = config_of(v, fam.denoiser_subfolder)
        return module_shapes(lambda: build(config))

    candidates = variants_for([detected], config_dir)
    if detected == "qwenimage21":  # Turbo and the base share shapes: the file's name picks (qwen21)
        candidates = qwen21.by_name(candidates, path.name)
    if detected == "krea2":  # so do Krea 2's Turbo and base: by the name too, the Turbo flag with its config
        candidates = krea2.by_name(candidates, path.name)
    variant = pick_variant(candidates, shapes, wanted, what="transformer", file_name=path.name)
    folder = folder_of(variant)
    config = config_of(variant, fam.denoiser_subfolder)
    torch_dtype, storage = resolve_precision(dtype, fam, mm.device)
    form = "GGUF, kept quantized" if is_gguf else file_form(path)
    message = f"{path.name}: {fam.title} transformer ({names} names, {form}), config: {variant.title}"
    blocks = denoiser_stream_blocks(fam, config)

    def make() -> torch.nn.Module:
        return build(config)

    if is_gguf:
        gguf_state = _dequantize_non_linear(gguf_state, make)
    if is_gguf or storage:
        from pipelines.quant.split import register_built

        if is_gguf and storage:
            message += f" (dtype {storage} ignored: a GGUF keeps its own quantization)"
        tensors = (lambda: gguf_state) if is_gguf else (lambda: KeyMapTensors(path, key_map))
        handle = register_built(
            mm,
            origin=path,
            part=fam.denoiser_subfolder,
            name=fam.denoiser_subfolder,
            kind="denoiser",
            make=make,
            tensors=tensors,
            dtype=torch_dtype,
            storage="gguf" if is_gguf else storage,
            source=str(path),
            blocks=blocks,
        )
    else:
        handle = _register_source(
            mm, path, fam.denoiser_subfolder, "denoiser", make, key_map, torch_dtype, blocks
        )
    if detected == "qwenimage21" and scheduler_config is None:
        scheduler_config = qwen21.scheduler_config(folder)  # with the config folder's sample_sigmas
    if detected == "minimax" and scheduler_config is None:
        scheduler_config = minimax_load.scheduler_config(
            folder
        )  # the audio rows' schedule beside the video's
    if detected == "krea2" and scheduler_config is None:
        scheduler_config = krea2.scheduler_config(folder)  # with the config folder's is_distilled
    return denoiser_ref(handle, fam, config, folder, torch_dtype, scheduler_config), message


def _dequantize_non_linear(state: dict[str, torch.Tensor], make: Any) -> dict[str, torch.Tensor]:
    """Quantized tensors that are no Linear/Embedding weight (Z-Image's pad tokens), or that the model keeps
    in float32 (`_keep_in_fp32_modules`: Wan's time embedder, which casts its input to its weight's dtype),
    as plain floats: only the other layers dequantize per call (`gguf_files.replace_gguf_linears`)."""
    from pipelines.quant.gguf_files import dequantize

    module = empty_module(make)
    keep = tuple(getattr(module, "_keep_in_fp32_modules", None) or ())
    layers = {
        f"{n}.weight"
        for n, m in module.named_modules()
        if type(m) in (torch.nn.Linear, torch.nn.Embedding) and not any(p in n.split(".") for p in keep)
    }
    return {
        k: dequantize(t, torch.float32) if hasattr(t, "quant_type") and k not in layers else t
        for k, t in state.items()
    }


def _register_source(
    mm: MemoryManager,
    path: Path,
    name: str,
    kind: str,
    make: Any,
    key_map: KeyMap,
    dtype: torch.dtype,
    blocks: tuple[str, ...],
) -> Any:
    """A handle the manager fills tensor by tensor from `path` (or streams by blocks), as single files are."""
    from pipelines.diffusion.lazy_load import CheckpointSource

    source = CheckpointSource(path, key_map)
    source.check(empty_module(make))  # names and shapes now, so a wrong file fails at load, not at run

    def build() -> torch.nn.Module:
        return empty_module(make)  # empty: the manager fills it from `source`

    return mm.register(
        ComponentSpec(
            **component_keys_for(path, name, dtype, "").spec_fields(),
            name=name,
            kind=kind,
            build=build,
            dtype=dtype,
            blocks=blocks,
            source=source,
        )
    )
