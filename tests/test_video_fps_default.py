"""VAE Decode Video's fps 0 means the model's own frame rate: what the saved video plays at.

A user who leaves fps at its default gets Wan's 16 fps and LTX-2's latent rate (24 in the shipped
img2video_ltx2.json), read back from the mp4 with PyAV as a player would; a set fps still wins.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import pytest

from tests.family_support import run_workflow

REPO = Path(__file__).resolve().parent.parent
TINY = {"sampler.steps": 2, "save.format": "mp4"}  # LTX-2 gives NaN frames at 1 step (shift_terminal)


def _rate(out: Path) -> Fraction:
    (mp4,) = sorted(out.glob("*.mp4"))
    with av.open(str(mp4)) as container:
        return container.streams.video[0].average_rate


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workflow", "fps", "expected"),
    [
        ("txt2video.json", 0, 16),  # Wan's rate
        ("txt2video.json", 12, 12),  # a set rate wins
        ("img2video_ltx2.json", 0, 24),  # the LTX-2 latent's rate
    ],
)
def test_fps_zero_is_the_models_rate(tmp_path: Path, workflow: str, fps: int, expected: int) -> None:
    assert run_workflow(REPO / "resources/workflows" / workflow, tmp_path, {**TINY, "decode.fps": fps}) == 0
    assert _rate(tmp_path) == expected
