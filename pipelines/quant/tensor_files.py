"""Tensors of weight files as lazy mappings: a tensor is read (memory-mapped) only when asked for.

Lives here: `SafetensorsTensors`. May import: stdlib, torch, safetensors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open


class SafetensorsTensors(Mapping[str, torch.Tensor]):
    """name -> tensor over one or more safetensors files (sharded), reading each tensor on access.

    `strip`: a key prefix removed from names (e.g. "model.diffusion_model." of a checkpoint's UNet); keys
    without it are hidden when given.
    """

    def __init__(self, files: tuple[Path, ...], strip: str = "") -> None:
        self.files, self.strip = files, strip
        self._where: dict[str, tuple[Path, str]] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():
                    if key.startswith(strip):
                        self._where[key.removeprefix(strip)] = (path, key)
                        self._shapes[key.removeprefix(strip)] = tuple(f.get_slice(key).get_shape())

    def __getitem__(self, name: str) -> torch.Tensor:
        path, key = self._where[name]
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes from the headers (no tensor data read)."""
        return dict(self._shapes)
