"""ComfyUI's KSampler samplers on Z-Image (`pipelines.diffusion.zimage_k_sampling`), the Z-Image templates'
`res_multistep`: on the tiny `demo:tiny-zimage` folder, `k_ddim` (ComfyUI's Euler) over ComfyUI's `simple`
flow sigmas gives ZImagePipeline's picture when the pipeline's flow-matching Euler is given those same sigmas,
so the noise scaling, the timestep 1 - sigma, the negated velocity and Z-Image's guidance are right; then
`k_res_multistep` makes a picture of its own; the samplers ComfyUI steps otherwise on flow models are refused
by name; and ComfyUI's Z-Image template keeps its res_multistep at import instead of approximating it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.diffusion.k_schedules import ksampler_sigmas
from pipelines.diffusion.wan_k_sampling import flow_sigmas
from tests.family_support import (
    TXT2IMG,
    assert_same_picture,
    demo_folder,
    only_picture,
    run_workflow,
    txt2img_sets,
)
from tests.test_family_zimage import HEIGHT, NEGATIVE, PROMPT, WIDTH

pytestmark = pytest.mark.slow  # each case runs tiny Z-Image graphs (seconds)

folder = demo_folder("tiny-zimage")
STEPS = 4


def _run(folder: Path, out: Path, scheduler: str, *, cfg: float, steps: int = STEPS) -> int:
    """txt2img.json on the folder with one of ComfyUI's samplers over its `simple` schedule."""
    sets = txt2img_sets(
        folder,
        cfg=cfg,
        steps=steps,
        seed=42,
        width=WIDTH,
        height=HEIGHT,
        prompt=PROMPT,
        negative=NEGATIVE,
        scheduler=scheduler,
    )
    return run_workflow(TXT2IMG, out, {**sets, "sampler.sigma_schedule": "simple"})


def _shift(folder: Path) -> float:
    import json

    return float(json.loads((folder / "scheduler/scheduler_config.json").read_text())["shift"])


def _pipeline_on_sigmas(folder: Path, sigmas: list[float], cfg: float) -> np.ndarray:
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline

    pipe = ZImagePipeline.from_pretrained(str(folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    # The sigmas as given: no shift of its own, no resolution-dependent one.
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(
        pipe.scheduler.config, shift=1.0, use_dynamic_shifting=False
    )
    image = pipe(
        PROMPT,
        negative_prompt=NEGATIVE,
        height=HEIGHT,
        width=WIDTH,
        sigmas=sigmas,
        num_inference_steps=len(sigmas),
        guidance_scale=cfg,
        generator=torch.Generator("cpu").manual_seed(42),
    ).images[0]
    return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize("cfg", [3.0, 0.0])
def test_k_ddim_on_zimage_is_the_pipelines_euler_over_comfyuis_simple_sigmas(
    folder: Path, tmp_path: Path, cfg: float
) -> None:
    sigmas = [float(s) for s in ksampler_sigmas("simple", flow_sigmas(_shift(folder)), STEPS, 1.0)[:-1]]
    assert _run(folder, tmp_path, "k_ddim", cfg=cfg) == 0
    a = only_picture(tmp_path)
    assert_same_picture(a, _pipeline_on_sigmas(folder, sigmas, cfg), (HEIGHT, WIDTH, 3), "zimage k_ddim")


def test_k_res_multistep_runs_on_zimage_and_is_its_own_picture(folder: Path, tmp_path: Path) -> None:
    assert _run(folder, tmp_path / "res", "k_res_multistep", cfg=3.0) == 0
    assert _run(folder, tmp_path / "ddim", "k_ddim", cfg=3.0) == 0
    res, ddim = only_picture(tmp_path / "res"), only_picture(tmp_path / "ddim")
    assert res.shape == ddim.shape and res.std() > 5
    assert not np.array_equal(res, ddim)  # the second-order steps took effect


def test_a_sampler_comfyui_steps_otherwise_on_flow_models_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code = _run(folder, tmp_path, "k_euler_ancestral", cfg=3.0, steps=2)
    err = capsys.readouterr().err
    assert code == 1 and "'euler_ancestral'" in err and "res_multistep" in err and "Traceback" not in err


def test_the_z_image_template_keeps_res_multistep_at_import(registry) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from nodes.comfy.sources import import_comfy
    from tests.wan_template_support import template_path

    result = import_comfy(template_path("image_z_image_turbo"), registry)
    [sampler] = [n for n in result.workflow["nodes"].values() if n["type"] in ("Sampler", "SamplerAdvanced")]
    assert sampler["params"]["scheduler"] == "k_res_multistep"
    assert not any("approximated" in note.message for note in result.notes), result.notes
