"""What the family tests share: the tiny demo folder a module's tests run on, running a shipped workflow
through `app --run` with `--set` values, reading back the picture or the frames it saved, and the checks
every image family makes on its txt2img picture.

Lives here: `demo_folder` (a fixture factory), `Txt2Img`, `assert_same_picture`, `block_sizes`, `run_workflow`,
`txt2img_sets`, `only_picture`, `frames_in`. Each family test keeps its own reference side (the diffusers
pipeline it is compared with) and its own sizes and prompts.
May import: stdlib, numpy, PIL, pytest, app.main, memory.weights, tests.demo_support.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from PIL import Image

from app.main import main
from tests.demo_support import copy_demo_model

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
STREAM = ("--offload", "stream", "--ram-budget", "2GiB")  # small enough that the blocks stream one by one


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


def demo_folder(name: str, *, scope: Literal["module", "session"] = "module") -> Any:
    """A fixture: demo model `name` (random weights, fixed seeds) saved once per `scope` to a temporary
    folder, loaded by path as a user's folder would be. Bind it to the fixture's name in the test module:
    `folder = demo_folder("tiny-krea2")`."""

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return copy_demo_model(name, tmp_path_factory.mktemp(name) / name)

    return fixture


@dataclass(frozen=True)
class Txt2Img:
    """One family's txt2img.json runs through the CLI: its prompts and picture size, the file it reads back."""

    prompt: str
    negative: str
    width: int
    height: int
    read: Callable[[Path], np.ndarray] = only_picture  # an RGB PNG; RGBA families pass their own

    def __call__(
        self, folder: Path, out: Path, *, cfg: float, steps: int = 3, seed: int = 42, extra: tuple = ()
    ) -> np.ndarray:
        """`app --run txt2img.json` on `folder` (the model's own scheduler) into `out`: the picture it saved."""
        sets = txt2img_sets(
            folder,
            cfg=cfg,
            steps=steps,
            seed=seed,
            width=self.width,
            height=self.height,
            prompt=self.prompt,
            negative=self.negative,
        )
        assert run_workflow(TXT2IMG, out, sets, extra) == 0
        return self.read(out)

    def assert_stream_is_none(self, folder: Path, tmp_path: Path, *, cfg: float) -> None:
        """`--offload stream` in a small budget gives the same picture as `none`, to the bit."""
        plain = self(folder, tmp_path / "none", cfg=cfg, extra=("--offload", "none"))
        streamed = self(folder, tmp_path / "stream", cfg=cfg, extra=STREAM)
        assert np.array_equal(plain, streamed)

    def assert_guidance_and_seed_matter(
        self, folder: Path, tmp_path: Path, *, cfg: float, off: float
    ) -> None:
        """Guidance `cfg` against the family's no-guidance value `off`, and another seed, change the picture."""
        base = self(folder, tmp_path / "a", cfg=cfg)
        assert not np.array_equal(base, self(folder, tmp_path / "b", cfg=off))
        assert not np.array_equal(base, self(folder, tmp_path / "c", cfg=cfg, seed=7))


def assert_same_picture(ours: np.ndarray, theirs: np.ndarray, shape: tuple[int, ...], label: str) -> None:
    """Our CLI's picture is the diffusers pipeline's: the same `shape`, a real picture, within 1 of 255."""
    assert ours.shape == theirs.shape == shape
    assert theirs[..., :3].std() > 5  # a real picture, not a flat one both sides could agree on by accident
    # Same ops on the same CPU kernels; 1 of 255 allows a float32 sum order difference at a rounding edge.
    diff = np.abs(ours.astype(int) - theirs.astype(int)).max()
    print(f"{label}: max uint8 difference {diff}")
    assert diff <= 1


def block_sizes(model: Any, patterns: Any) -> tuple[list[str], int, list[int]]:
    """A model's declared blocks (`memory.weights.block_names` of the family's patterns), its parameter
    count, and each block's: what `stream` holds at once is the weights outside the blocks plus a window."""
    from memory.weights import block_names

    blocks = block_names(model, patterns)
    sizes = [sum(p.numel() for p in model.get_submodule(b).parameters()) for b in blocks]
    return blocks, sum(p.numel() for p in model.parameters()), sizes
