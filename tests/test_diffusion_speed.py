"""Diffusion speed choices (issue 33): what a run does for speed is decided by a stated rule and reported.

What a user checks: the run report says which speed options a Sampler ran with (so a figure can be read
against them); on a CPU they are the measured defaults (no option paid there, see pipelines/diffusion/speed.py);
a device nobody measured says so; First-Block Cache on SD3, which diffusers' hook cannot run (its last block
returns no text stream), is refused naming the cache to use instead rather than failing mid-run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.diffusion.speed import describe, metrics, speed_choices
from pipelines.diffusion.step_cache import StepCache, step_cache
from tests.family_support import run_workflow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


def test_cpu_runs_take_the_measured_defaults_and_name_them() -> None:
    choices = speed_choices("cpu")
    assert (choices.channels_last, choices.compiled, choices.cfg_batched) == (False, False, True)
    assert choices.threads == torch.get_num_threads()
    line = describe(choices)
    for word in ("attention sdpa-default", "contiguous", "compile off", "CFG one batch", "threads"):
        assert word in line
    assert metrics(choices)["speed_threads"] == torch.get_num_threads()


def test_an_unmeasured_device_says_it_runs_the_defaults_unmeasured() -> None:
    choices = speed_choices("cuda:1")
    assert choices.device == "cuda" and not choices.compiled and not choices.channels_last
    assert "not measured on cuda" in describe(choices)


@pytest.mark.slow  # imports diffusers' models and hooks (peft): seconds in a fresh process
def test_first_block_cache_on_sd3_is_refused_before_the_run() -> None:
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    model = SD3Transformer2DModel(
        sample_size=8,
        patch_size=1,
        in_channels=4,
        num_layers=2,  # the last of them keeps no text stream (context_pre_only), as in every SD3
        attention_head_dim=8,
        num_attention_heads=2,
        caption_projection_dim=16,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        out_channels=4,
    )
    with pytest.raises(ValueError, match="returns no text stream.*use cache taylorseer"):
        with step_cache(model, StepCache("first-block", 0.1), 4):
            pass
    assert not any(hasattr(m, "_diffusers_hook") and m._diffusers_hook.hooks for m in model.modules())


@pytest.mark.slow
def test_the_run_report_carries_the_samplers_speed_choices(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    sets = {"sampler.steps": 2, "latent.width": 32, "latent.height": 32}
    assert run_workflow(TXT2IMG, tmp_path / "out", sets, ["--report", str(report)]) == 0
    sampler = json.loads(report.read_text(encoding="utf-8"))["runs"][0]["nodes"]["sampler"]
    assert sampler["metrics"]["speed_threads"] == torch.get_num_threads()
    assert sampler["metrics"]["speed_compiled"] == 0.0 and sampler["metrics"]["speed_cfg_batched"] == 1.0
