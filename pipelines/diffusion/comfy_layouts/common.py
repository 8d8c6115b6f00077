"""Helpers the ComfyUI-layout loaders share: header keys, key maps over a file, converted shapes.

Lives here: `file_keys`, `file_form`, `converted_shapes`, `KeyMapTensors`, `file_key_map`, `aligned`, `config_of`.
May import:
stdlib, torch, safetensors, pipelines.diffusion.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from pipelines.diffusion.assembly import read_json
from pipelines.diffusion.comfy_layouts import comfy_quant
from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8
from pipelines.diffusion.comfy_layouts.variants import Variant, folder_of
from pipelines.diffusion.lazy_load import KeyMap, Recipe, _replay, trace_conversion


def file_keys(path: Path) -> list[str]:
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def file_form(path: Path) -> str:
    """How a file's weights are stored, for the loader's message: "int8_tensorwise convrot x200, dequantized",
    "fp8 scaled, dequantized" or "plain"."""
    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        layers = comfy_quant.quant_layers(comfy_quant.read_markers(f, keys, path.name), keys, path.name)
    if layers:
        return f"{comfy_quant.describe(layers)}, dequantized"
    return "fp8 scaled, dequantized" if is_scaled_fp8(keys) else "plain"


def converted_shapes(key_map: Mapping[str, Recipe]) -> dict[str, tuple[int, ...]]:
    return {name: r.shape for name, r in key_map.items()}


class KeyMapTensors(Mapping[str, torch.Tensor]):
    """module name -> tensor, each read from the file and its recipe replayed when asked for."""

    def __init__(self, path: Path, key_map: KeyMap) -> None:
        self.path, self.key_map = path, key_map

    def __getitem__(self, name: str) -> torch.Tensor:
        recipe = self.key_map[name]
        with safe_open(str(self.path), framework="pt") as f:
            return _replay(recipe.node, {k: f.get_tensor(k) for k in recipe.keys})

    def __iter__(self) -> Iterator[str]:
        return iter(self.key_map)

    def __len__(self) -> int:
        return len(self.key_map)


def file_key_map(path: Path, convert: Any) -> KeyMap:
    """The recipes of `convert` (ComfyUI names -> diffusers names) over the file, fp8 scales applied first."""
    scaled = is_scaled_fp8(file_keys(path))
    return trace_conversion(path, lambda stubs: convert(dequantize_stubs(stubs) if scaled else stubs))


def aligned(key_map: KeyMap, wanted: Mapping[str, tuple[int, ...]]) -> KeyMap:
    """The key map renamed to the module's names (prefixes stripped as `match_names` does), extras dropped."""
    from pipelines.quant.meta_load import match_names

    return {module: key_map[key] for key, module in match_names(key_map.keys(), wanted.keys()).items()}


def config_of(variant: Variant, subfolder: str) -> dict[str, Any]:
    return read_json(folder_of(variant) / subfolder / "config.json")
