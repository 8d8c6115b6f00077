"""PNG files that carry their workflow, and IMAGE value conversions.

Lives here: `save_png_with_workflow`, `read_embedded_workflow(_text)`, `EmbeddedWorkflowError`,
`next_free_path`, `tensor_to_pil`, `pil_to_tensor`. Imports PIL, numpy, torch, `nodes.files`, `nodes.png_text`
(the bounded chunk reader), `nodes.workflow_json` (the JSON limits).
An IMAGE value is a float32 tensor (B, H, W, C) in [0, 1].
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, PngImagePlugin

from nodes.files import check_prefix as check_prefix  # re-exported: callers import it from here
from nodes.files import glob_escape
from nodes.png_text import NODELOOM_KEY as PNG_WORKFLOW_KEY
from nodes.png_text import PngTextError as EmbeddedWorkflowError  # re-exported: callers catch it from here
from nodes.png_text import read_png_texts
from nodes.workflow_json import MAX_FILE_BYTES, WorkflowFileError, parse_json_text


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


def read_embedded_workflow_text(path: Path) -> str | None:
    """The workflow text embedded in a PNG, None when it carries none; `EmbeddedWorkflowError` when the
    file or its text chunks cannot be read (random bytes, a damaged chunk, a decompression bomb, a declared
    size past PIL's limit). Reads only the chunks, never the picture."""
    try:
        with Path(path).open("rb") as f:
            text = read_png_texts(f, (PNG_WORKFLOW_KEY,), MAX_FILE_BYTES).get(PNG_WORKFLOW_KEY)
    except OSError as exc:
        raise EmbeddedWorkflowError(f"cannot read the file: {exc.strerror or exc}") from None
    return text


def read_embedded_workflow(path: Path) -> dict[str, Any] | None:
    """The embedded workflow as a dict; None when the PNG carries none or it is not a JSON object."""
    text = read_embedded_workflow_text(path)
    if not text:
        return None
    try:
        data = parse_json_text(text)
    except WorkflowFileError:
        return None
    return data if isinstance(data, dict) else None
