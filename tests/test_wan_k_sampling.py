"""ComfyUI's KSampler samplers on Wan (`pipelines.diffusion.wan_k_sampling`): on the tiny `demo:tiny-wan` folder,
`k_ddim` over ComfyUI's `simple` flow sigmas gives WanPipeline's frames when its flow-matching Euler is given
those same sigmas (so the noise scaling, the timestep 1000 x sigma, the velocity -> clean estimate and the
guidance are ComfyUI's flow-model ones); `k_uni_pc` runs a video of its own; the samplers ComfyUI steps
differently on flow models are refused by name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.diffusion.k_schedules import ksampler_sigmas
from pipelines.diffusion.wan_k_sampling import flow_sigmas
from tests.family_support import frames_in
from tests.test_family_wan import FRAMES, HEIGHT, NEGATIVE, PROMPT, WIDTH, assert_same_video, run_cli

pytestmark = pytest.mark.slow  # each case runs tiny Wan video graphs (seconds)

SHIFT = 3.0  # demo:tiny-wan's flow_shift (Wan 2.1 480p's)


def _comfy_simple_sigmas(steps: int) -> list[float]:
    return [float(s) for s in ksampler_sigmas("simple", flow_sigmas(SHIFT), steps, 1.0)[:-1]]


def _pipeline_on_sigmas(folder: Path, sigmas: list[float], cfg: float) -> np.ndarray:
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(
        pipe.scheduler.config, shift=1.0
    )  # sigmas as given
    set_timesteps = scheduler.set_timesteps
    scheduler.set_timesteps = lambda steps, device=None: set_timesteps(sigmas=sigmas, device=device)
    pipe.scheduler = scheduler
    video = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        num_frames=FRAMES,
        num_inference_steps=len(sigmas),
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(42),
        output_type="np",
    ).frames[0]
    return (video * 255).round().astype(np.uint8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.demo_support import copy_demo_model

    return copy_demo_model("tiny-wan", tmp_path_factory.mktemp("wan-k") / "tiny-wan")


def test_k_ddim_on_wan_is_flow_euler_over_comfyuis_simple_sigmas(folder: Path, tmp_path: Path) -> None:
    sets = {"sampler.scheduler": "k_ddim", "sampler.sigma_schedule": "simple"}
    assert run_cli(folder, tmp_path / "ddim", cfg=5.0, sets=sets) == 0
    assert_same_video(frames_in(tmp_path / "ddim"), _pipeline_on_sigmas(folder, _comfy_simple_sigmas(4), 5.0))


def test_k_uni_pc_runs_on_wan_and_is_its_own_video(folder: Path, tmp_path: Path) -> None:
    base = {"sampler.sigma_schedule": "simple"}
    assert run_cli(folder, tmp_path / "unipc", cfg=5.0, sets={**base, "sampler.scheduler": "k_uni_pc"}) == 0
    assert run_cli(folder, tmp_path / "ddim", cfg=5.0, sets={**base, "sampler.scheduler": "k_ddim"}) == 0
    unipc, ddim = frames_in(tmp_path / "unipc"), frames_in(tmp_path / "ddim")
    assert unipc.shape == ddim.shape and unipc.std() > 5
    assert not np.array_equal(unipc, ddim)  # the predictor-corrector took effect


def test_a_sampler_comfyui_steps_otherwise_on_flow_models_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert run_cli(folder, tmp_path, cfg=5.0, sets={"sampler.scheduler": "k_euler_ancestral"}) == 1
    err = capsys.readouterr().err
    assert "'euler_ancestral'" in err and "uni_pc" in err and "Traceback" not in err
