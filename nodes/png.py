"""PNG files that carry their workflow, and IMAGE value conversions.

Lives here: `save_png_with_workflow`, `read_embedded_workflow`, `next_free_path`, `check_prefix`, `tensor_to_pil`,
`pil_to_tensor`. Imports PIL, numpy, torch. An IMAGE value is a float32 tensor (B, H, W, C) in [0, 1].
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, PngImagePlugin

PNG_WORKFLOW_KEY = "nodeloom.workflow"


def tensor_to_pil(images: torch.Tensor) -> list[Image.Image]:
    if images.ndim == 3:
        images = images.unsqueeze(0)
    array = (images.detach().float().clamp(0, 1).cpu().numpy() * 255.0).round().astype(np.uint8)
    return [Image.fromarray(a[..., 0] if a.shape[-1] == 1 else a) for a in array]


def pil_to_tensor(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(array).unsqueeze(0)  # (1, H, W, C)


def alpha_mask(image: Image.Image) -> torch.Tensor:
    """(1, H, W) MASK from the alpha channel (transparent = 1, repaint), as ComfyUI's Load Image; zeros
    (keep everything) when the picture has no alpha."""
    if "A" not in image.getbands() and not (image.mode == "P" and "transparency" in image.info):
        return torch.zeros(1, image.height, image.width)
    alpha = np.asarray(image.convert("RGBA"), dtype=np.float32)[..., 3] / 255.0
    return torch.from_numpy(1.0 - alpha).unsqueeze(0)


def check_prefix(prefix: str) -> None:
    """A file-name prefix must name a file in the output folder, never a path out of it."""
    if not prefix or prefix in (".", "..") or any(c in prefix for c in "/\\\0") or ".." in prefix:
        raise ValueError(f"field 'prefix': {prefix!r} must be a plain file name (no folders, no '..')")


def next_free_path(folder: Path, prefix: str, suffix: str) -> Path:
    """`prefix_00001.suffix`, the first number not taken; created exclusively so two runs never clobber."""
    check_prefix(prefix)
    folder.mkdir(parents=True, exist_ok=True)
    existing = [p.stem.removeprefix(prefix + "_") for p in folder.glob(f"{prefix}_*{suffix}")]
    numbers = [int(s) for s in existing if s.isdigit()]
    n = max(numbers, default=0) + 1
    while True:
        path = folder / f"{prefix}_{n:05d}{suffix}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return path


def save_png_with_workflow(image: Image.Image, path: Path, workflow: dict[str, Any] | None) -> None:
    info = PngImagePlugin.PngInfo()
    if workflow is not None:
        info.add_itxt(PNG_WORKFLOW_KEY, json.dumps(workflow, ensure_ascii=False))
    image.save(path, format="PNG", pnginfo=info)


def read_embedded_workflow(path: Path) -> dict[str, Any] | None:
    with Image.open(path) as image:
        text = image.info.get(PNG_WORKFLOW_KEY) if hasattr(image, "info") else None
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None
