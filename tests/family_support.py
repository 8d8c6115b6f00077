"""What the family tests share: running a shipped workflow through `app --run` with `--set` values, and
reading back the picture or the frames it saved.

Lives here: `run_workflow`, `txt2img_sets`, `only_picture`, `frames_in`. Each family test keeps its own
reference side (the diffusers pipeline it is compared with) and its own sizes and prompts.
May import: stdlib, numpy, PIL, app.main.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from app.main import main


def run_workflow(workflow: Path, out: Path, sets: Mapping[str, object], extra: Sequence[str] = ()) -> int:
    """`app --run WORKFLOW --out OUT --quiet --device cpu` with one `--set` per item; the exit code."""
    args = ["--run", str(workflow), "--out", str(out), "--quiet", "--device", "cpu", *extra]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return main(args)


def txt2img_sets(
    folder: Path,
    *,
    cfg: float,
    steps: int,
    seed: int,
    width: int,
    height: int,
    prompt: str,
    negative: str,
    scheduler: str = "default",
) -> dict[str, object]:
    """txt2img.json's fields for a family parity run (the model's own scheduler unless told)."""
    return {
        "load.path": str(folder),
        "sampler.scheduler": scheduler,
        "sampler.steps": steps,
        "sampler.cfg": cfg,
        "sampler.seed": seed,
        "latent.width": width,
        "latent.height": height,
        "positive.text": prompt,
        "negative.text": negative,
    }


def only_picture(out: Path) -> np.ndarray:
    """The one PNG a run saved under `out`, as uint8 RGB."""
    (png,) = sorted(out.glob("*.png"))
    return np.asarray(Image.open(png).convert("RGB"))


def frames_in(out: Path) -> np.ndarray:
    """The frames a video run saved as one PNG per frame (format png), in order, as (T, H, W, 3) uint8."""
    names = sorted(p.name for p in out.iterdir())
    assert all(n.endswith(".png") for n in names), names  # one PNG per frame and nothing else
    return np.stack([np.asarray(Image.open(out / n).convert("RGB")) for n in names])
