"""Step caches (issue 33): the Sampler's `cache` field puts diffusers' hooks on a DiT for one run.

What a user checks: with a cache on, the run does less work (fewer attention calls: the skipped blocks'
attention never runs) and the picture stays close to the uncached one; with it off, the picture is the exact
uncached one; the hooks are gone after the run (the next uncached run in the same process is unchanged);
a model the caches do not apply to is refused with a message naming the field. The fixtures are the tiny
offline demo models (random weights, fixed seeds) through `app --run txt2img.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.main import main
from nodes.comfy.sources import import_comfy_data
from pipelines.diffusion.step_cache import STEP_CACHES, StepCache
from tests.comfy_ids import by_comfy_id
from tests.demo_support import copy_demo_model
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
    # EasyCache on whole denoiser calls: Qwen-Image's separate passes follow the positive pass's decision;
    # Z-Image's doubled CFG batch is one call. 0.5: the tiny models' outputs change faster than a trained
    # model's, so ComfyUI's 0.2 skips nothing on Z-Image here.
    ("tiny-qwenimage", 3.0, "easy", 0.5),
    ("tiny-zimage", 3.0, "easy", 0.5),
]


@pytest.mark.slow
@pytest.mark.parametrize(("demo", "cfg", "method", "threshold"), CASES)
def test_a_step_cache_skips_work_and_keeps_the_picture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo: str, cfg: float, method: str, threshold: float
) -> None:
    folder = copy_demo_model(demo, tmp_path / demo)
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
    assert "cache 'first-block'" in text and "use cache easy, or off" in text
    assert "Traceback" not in text


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["dpmpp_2m", "k_euler"])  # diffusers' loop, and ComfyUI's KSampler's
def test_the_easy_cache_reuses_whole_unet_steps_on_the_sd_demo_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> None:
    """The shipped (trained) SD demo model, 20 steps as a user runs it: EasyCache needs no block list."""
    from diffusers import UNet2DConditionModel

    unet_calls = 0
    forward = UNet2DConditionModel.forward

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal unet_calls
        unet_calls += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(UNet2DConditionModel, "forward", counted)
    sets = {"sampler.steps": 20, "sampler.scheduler": scheduler, "latent.width": 64, "latent.height": 64}
    assert run_workflow(TXT2IMG, tmp_path / "plain", sets) == 0
    plain, plain_calls, unet_calls = only_picture(tmp_path / "plain").astype(np.float64), unet_calls, 0
    report = tmp_path / "report.json"
    cached_sets = {**sets, "sampler.cache": "easy", "sampler.cache_threshold": 0.2}
    assert run_workflow(TXT2IMG, tmp_path / "cached", cached_sets, ["--report", str(report)]) == 0
    cached = only_picture(tmp_path / "cached").astype(np.float64)
    sampler = json.loads(report.read_text(encoding="utf-8"))["runs"][0]["nodes"]["sampler"]
    reused = sampler["metrics"]["cache_reused_steps"]
    print(f"SD demo {scheduler} easy@0.2: {reused:.0f} of 20 steps reused, PSNR {psnr(plain, cached):.1f} dB")

    assert plain.std() > 5
    assert plain_calls == 20  # one UNet call per step (CFG is one doubled batch)
    assert reused >= 3  # measured 9 (dpmpp_2m) and 4 (k_euler) of 20 here
    assert unet_calls == 20 - reused  # a reused step does not run the UNet: the report's count is true
    assert psnr(plain, cached) >= 30  # measured 40 and 44 dB: the trained model's late steps change little


def test_comfyuis_easycache_node_becomes_the_samplers_easy_cache(registry) -> None:
    prompt = {
        "1": {
            "class_type": "CheckpointLoaderSimple",
            "inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"},
        },
        "2": {
            "class_type": "EasyCache",
            "inputs": {
                "model": ["1", 0],
                "reuse_threshold": 0.25,
                "start_percent": 0.15,
                "end_percent": 0.95,
            },
        },
        "3": {
            "class_type": "KSampler",
            "inputs": {
                "seed": 1,
                "steps": 20,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
                "model": ["2", 0],
            },
        },
    }
    result = import_comfy_data(prompt, registry, "easy.json", title="easy")
    nodes = by_comfy_id(result.workflow)
    assert "2" not in nodes  # the patch is not a node here: the sampler carries the setting
    assert nodes["3"]["inputs"]["denoiser"] == ["1", "denoiser"]
    assert nodes["3"]["params"]["cache"] == "easy" and nodes["3"]["params"]["cache_threshold"] == 0.25
    assert any("EasyCache" in str(note) for note in result.notes)
