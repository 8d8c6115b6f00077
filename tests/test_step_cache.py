"""Step caches (issue 33): the Sampler's `cache` field puts diffusers' hooks on a DiT for one run.

What a user checks: with a cache on, the run does less work (fewer attention calls: the skipped blocks'
attention never runs) and the picture stays close to the uncached one; with it off, the picture is the exact
uncached one; the hooks are gone after the run (the next uncached run in the same process is unchanged);
a model the caches do not apply to is refused with a message naming the field. The fixtures are the tiny
offline demo models (random weights, fixed seeds) through `app --run txt2img.json`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from app.main import main
from pipelines.diffusion.demo_models import save_demo_model
from pipelines.diffusion.step_cache import STEP_CACHES, StepCache
from tests.family_support import only_picture, run_workflow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
STEPS = 12


def test_step_cache_names_and_thresholds_are_checked() -> None:
    assert STEP_CACHES[0] == "off" and {"first-block", "taylorseer"} <= set(STEP_CACHES)
    with pytest.raises(ValueError, match="choose one of off"):
        StepCache("teacache")
    with pytest.raises(ValueError, match="above 0"):
        StepCache("first-block", 0.0)
    assert not StepCache().on


class AttentionCalls:
    """Counts scaled_dot_product_attention calls (diffusers' attention dispatch ends there on CPU)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = torch.nn.functional.scaled_dot_product_attention

        def counted(*args: object, **kwargs: object) -> torch.Tensor:
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)


def run(folder: Path, out: Path, sets: dict[str, object]) -> np.ndarray:
    base = {
        "load.path": str(folder),
        "sampler.scheduler": "default",
        "sampler.steps": STEPS,
        "latent.width": 64,
        "latent.height": 64,
        "positive.text": "a red square on a blue field",
        "negative.text": "blurry",
    }
    assert run_workflow(TXT2IMG, out, {**base, **sets}) == 0
    return only_picture(out).astype(np.float64)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


CASES = [
    # (demo model, cfg, cache, threshold): First-Block Cache on FLUX.1 (no CFG) and Qwen-Image (separate
    # positive and negative calls, so two cache states); TaylorSeer on SD3 (CFG on one doubled batch) and
    # Z-Image (diffusers' First-Block Cache cannot hook its blocks: they take `x`, not `hidden_states`).
    # Thresholds: the tiny random-weight models change a lot per step, so they need a looser first-block
    # threshold than a trained model's 0.05-0.2 to skip anything.
    ("tiny-flux", 3.5, "first-block", 0.5),
    ("tiny-qwenimage", 3.0, "first-block", 0.6),
    ("tiny-sd3", 4.0, "taylorseer", 3),
    ("tiny-zimage", 3.0, "taylorseer", 3),
]


@pytest.mark.slow
@pytest.mark.parametrize(("demo", "cfg", "method", "threshold"), CASES)
def test_a_step_cache_skips_work_and_keeps_the_picture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo: str, cfg: float, method: str, threshold: float
) -> None:
    folder = save_demo_model(demo, tmp_path / demo)
    calls = AttentionCalls(monkeypatch)
    plain = run(folder, tmp_path / "plain", {"sampler.cfg": cfg})
    plain_calls, calls.count = calls.count, 0
    cached = run(
        folder,
        tmp_path / "cached",
        {"sampler.cfg": cfg, "sampler.cache": method, "sampler.cache_threshold": threshold},
    )
    cached_calls, calls.count = calls.count, 0
    again = run(folder, tmp_path / "again", {"sampler.cfg": cfg})
    print(
        f"{demo} {method}@{threshold}: attention calls {cached_calls}/{plain_calls}, PSNR {psnr(plain, cached):.1f} dB"
    )

    assert plain.std() > 5  # a real picture, not a flat one any cache would keep
    assert cached_calls < 0.8 * plain_calls  # the cache skipped at least a fifth of the attention work
    # Random tiny weights change a lot from step to step, so a cache costs more here than on a trained
    # model; 25 dB still means the same picture with small local differences.
    assert psnr(plain, cached) >= 25
    assert calls.count == plain_calls and np.array_equal(again, plain)  # the hooks left with the run


@pytest.mark.slow
def test_a_cache_on_a_unet_model_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    args = [
        "--run",
        str(TXT2IMG),
        "--out",
        str(tmp_path),
        "--device",
        "cpu",
        "--set",
        "sampler.cache=first-block",
    ]
    assert main(args + ["--set", "sampler.steps=2"]) == 1
    err = capsys.readouterr()
    text = err.out + err.err
    assert "cache 'first-block'" in text and "set cache to off" in text
    assert "Traceback" not in text
