"""Sweep flags that would build more jobs than anyone can run: refused up front, exit 2, naming the flags.

Covers a grid whose axes are each under the per-axis cap but whose product is not, and range ends too large
for a float (`1e400`). Nothing here runs a job.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.main import main
from nodes.sweep import MAX_JOBS, SweepAxis, SweepError, parse_spec, plan_jobs

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


def _axis(name: str, count: int) -> SweepAxis:
    return SweepAxis("sampler", name, tuple(range(count)), f"--sweep sampler.{name}=0..{count - 1}")


def test_a_grid_over_the_job_cap_is_refused_naming_every_axis_and_the_count() -> None:
    axes = [_axis("seed", 50), _axis("cfg", 50), _axis("steps", 50)]  # 125,000 jobs, each axis tiny
    with pytest.raises(SweepError) as caught:
        plan_jobs(axes)
    message = str(caught.value)
    assert all(a.flag in message for a in axes)
    assert "125,000 jobs" in message and f"{MAX_JOBS:,}" in message


def test_a_grid_at_the_cap_and_a_long_zip_still_plan() -> None:
    assert len(plan_jobs([_axis("seed", 1000), _axis("cfg", 100)])) == MAX_JOBS
    assert len(plan_jobs([_axis("seed", 1000), _axis("cfg", 1000)], zip_axes=True)) == 1000


@pytest.mark.parametrize("spec", ["1..1e400", "1e400..1", "0..1:1e400", "-1e400..0"])
def test_a_range_end_too_large_for_a_float_is_a_sweep_error(spec: str) -> None:
    with pytest.raises(SweepError, match="too large a number"):
        parse_spec(spec, flag=f"--sweep sampler.seed={spec}")


def test_a_huge_finite_range_is_refused_with_a_short_count() -> None:
    with pytest.raises(SweepError) as caught:
        parse_spec("1..1e300", flag="f")
    assert "about 1e+300 values" in str(caught.value) and len(str(caught.value)) < 100


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["sampler.seed=1..100000", "sampler.cfg=0..99.999:0.001"], "10,000,000,000 jobs"),
        (["sampler.seed=1..1e400"], "1e400 is too large"),
    ],
)
def test_the_cli_refuses_within_seconds_with_exit_2(tmp_path: Path, capsys, flags, expected) -> None:
    argv = ["--run", str(TXT2IMG), "--out", str(tmp_path / "out"), "--quiet"]
    for flag in flags:
        argv += ["--sweep", flag]
    started = time.monotonic()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and "Traceback" not in err
    assert all(f"--sweep {flag}" in err for flag in flags)
    # Generous: parsing two 100,000-value axes takes well under a second here; building 10^10 jobs never ends.
    assert time.monotonic() - started < 20
    assert not (tmp_path / "out").exists()
