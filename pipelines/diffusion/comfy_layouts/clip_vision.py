"""ComfyUI's CLIP vision files (`models/clip_vision/`, e.g. `clip_vision_h.safetensors`): Wan 2.1 I2V's image
encoder, loaded as the same lazy component a Wan 2.1 I2V diffusers folder's `image_encoder` is.

Lives here: `load_comfy_clip_vision`. May import: stdlib, torch, transformers, memory, pipelines.diffusion.

ComfyUI's files keep transformers' names (`vision_model.*`, and `visual_projection.weight`, which the encoder's
hidden states do not use and is left out); OpenCLIP's own layout (`visual.transformer.*`) is refused, naming
it. The size comes from the shipped config folders whose `image_encoder/` the shapes fit (the tiny demo's, or
ViT-H/14, the one Wan 2.1 I2V uses), and the picture processor from the same folder's `image_processor/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from memory import ComponentSpec, MemoryManager
from pipelines.diffusion.assembly import component_keys_for, read_json
from pipelines.diffusion.comfy_layouts.common import aligned, converted_shapes, file_key_map, file_keys
from pipelines.diffusion.comfy_layouts.variants import (
    VARIANTS,
    Variant,
    folder_of,
    module_shapes,
    pick_variant,
)
from pipelines.diffusion.families import UnsupportedModelError
from pipelines.diffusion.lazy_load import CheckpointSource, empty_module
from pipelines.diffusion.wan_image import ImageEncoderRef

_PREFIX = "vision_model."


def _candidates(config_dir: Path | None) -> list[Variant]:
    if config_dir is not None:
        return [Variant(str(config_dir), "wan", f"the config folder {config_dir}")]
    return [v for v in VARIANTS if (v.folder / "image_encoder" / "config.json").is_file()]


def _make(config: dict[str, Any]) -> Any:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    fields = {
        k: v for k, v in config.items() if k not in ("architectures", "model_type", "transformers_version")
    }
    return lambda: CLIPVisionModel(CLIPVisionConfig(**fields))


def load_comfy_clip_vision(
    mm: MemoryManager, path: Path, *, config_dir: Path | None = None
) -> tuple[ImageEncoderRef, str]:
    """A CLIP vision encoder file -> Wan's image encoder (float32, as the folder's is loaded) and a message."""
    keys = file_keys(path)
    if not any(k.startswith(_PREFIX) for k in keys):
        layout = (
            "OpenCLIP's names (visual.*)"
            if any(k.startswith("visual.") for k in keys)
            else "no vision_model.*"
        )
        raise UnsupportedModelError(
            f"{path.name}: not a CLIP vision encoder in ComfyUI's (transformers') names: {layout}"
        )
    # transformers 5's CLIPVisionModel names its tensors without the `vision_model.` prefix the files keep.
    key_map = file_key_map(
        path, lambda state: {k.removeprefix(_PREFIX): v for k, v in state.items() if k.startswith(_PREFIX)}
    )

    def wanted(v: Variant) -> dict[str, tuple[int, ...]]:
        return module_shapes(_make(read_json(folder_of(v) / "image_encoder" / "config.json")))

    variant = pick_variant(
        _candidates(config_dir),
        converted_shapes(key_map),
        wanted,
        what="CLIP vision encoder",
        file_name=path.name,
    )
    root = folder_of(variant)
    config = read_json(root / "image_encoder" / "config.json")
    make = _make(config)
    key_map = aligned(key_map, wanted(variant))
    source = CheckpointSource(path, key_map)
    source.check(empty_module(make))  # names and shapes now, so a wrong file fails at load, not at run
    dtype = torch.float32
    handle = mm.register(
        ComponentSpec(
            **component_keys_for(path, "image_encoder", dtype, "").spec_fields(),
            name="image_encoder",
            kind="image_encoder",
            build=lambda: empty_module(make),
            dtype=dtype,
            source=source,
        )
    )
    message = f"{path.name}: CLIP vision encoder, config: {variant.title}"
    return ImageEncoderRef(handle, root, config, dtype), message
