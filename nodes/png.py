"""PNG files that carry their workflow, and IMAGE value conversions.

Lives here: `save_png_with_workflow`, `read_embedded_workflow(_text)`, `EmbeddedWorkflowError`,
`next_free_path`, `tensor_to_pil`, `pil_to_tensor`. Imports PIL, numpy, torch, `nodes.files`.
An IMAGE value is a float32 tensor (B, H, W, C) in [0, 1].
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, PngImagePlugin, UnidentifiedImageError

from nodes.files import check_prefix as check_prefix  # re-exported: callers import it from here
from nodes.files import glob_escape

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


def next_free_path(folder: Path, prefix: str, suffix: str) -> Path:
    """`prefix_00001.suffix`, the first number not taken; created exclusively (empty, 0666 & ~umask).

    Prefer `nodes.files.write_new_output`, which never shows an empty or partial file under the name."""
    check_prefix(prefix)
    folder.mkdir(parents=True, exist_ok=True)
    existing = [p.stem.removeprefix(prefix + "_") for p in folder.glob(f"{glob_escape(prefix)}_*{suffix}")]
    numbers = [int(s) for s in existing if s.isdigit()]
    n = max(numbers, default=0) + 1
    while True:
        path = folder / f"{prefix}_{n:05d}{suffix}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
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


class EmbeddedWorkflowError(ValueError):
    """A PNG that cannot be read, or whose embedded workflow is damaged; the message says which."""


def read_embedded_workflow_text(path: Path) -> str | None:
    """The workflow text embedded in a PNG, None when it carries none; `EmbeddedWorkflowError` when the
    image or its text chunk cannot be read (random bytes, a damaged chunk, a decompression bomb)."""
    try:
        with Image.open(path, formats=["PNG"]) as image:
            text = image.info.get(PNG_WORKFLOW_KEY)
    except UnidentifiedImageError:
        raise EmbeddedWorkflowError("not a PNG image (or a damaged one)") from None
    except ValueError as exc:
        # PIL refuses a text chunk that decompresses past ImageFile/PngImagePlugin.MAX_TEXT_CHUNK.
        if "Decompressed" in str(exc) or "Too Large" in str(exc):
            limit = PngImagePlugin.MAX_TEXT_CHUNK // 2**20
            raise EmbeddedWorkflowError(
                f"a text chunk decompresses to more than {limit} MiB; refused (a real workflow is far smaller)"
            ) from None
        raise EmbeddedWorkflowError(f"damaged PNG: {str(exc)[:200]}") from None
    except (OSError, SyntaxError, EOFError) as exc:  # PIL raises SyntaxError for broken chunks
        raise EmbeddedWorkflowError(f"damaged PNG: {str(exc)[:200]}") from None
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text)


def read_embedded_workflow(path: Path) -> dict[str, Any] | None:
    """The embedded workflow as a dict; None when the PNG carries none or it is not a JSON object."""
    text = read_embedded_workflow_text(path)
    if not text:
        return None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
