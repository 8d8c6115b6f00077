"""ComfyUI's SDTurboScheduler folds onto our Sampler's "simple" schedule only where the two give the same sigmas
(nodes/comfy/mapping_turbo.py): checked against a re-write of ComfyUI's scheduler over SDXL's noise table; the
SDXL-Turbo template imports and checks clean as a one-step "simple" Sampler, and runs on a tiny SDXL single file.
The template tests skip without ComfyUI's template package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nodes.comfy.mapping_turbo import simple_equivalent
from nodes.comfy.sources import check_comfy, import_comfy_data
from nodes.registry import default_registry
from pipelines.diffusion.k_schedules import DiscreteSigmas, ksampler_sigmas

_SDXL = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}


def _comfy_turbo_sigmas(ms: DiscreteSigmas, steps: int, denoise: float) -> torch.Tensor:
    # ComfyUI's SDTurboScheduler.get_sigmas, re-written: ten distilled timesteps, a slice, their sigmas, a 0
    start_step = 10 - int(10 * denoise)
    timesteps = torch.flip(torch.arange(1, 11) * 100 - 1, (0,))[start_step : start_step + steps]
    return torch.cat([ms.sigmas[timesteps], torch.zeros(1)])


def test_every_folded_case_gives_comfyuis_turbo_sigmas() -> None:
    ms = DiscreteSigmas.from_scheduler_config(_SDXL)
    folded = []
    for steps in range(1, 11):
        for tenth in range(0, 21):
            denoise = tenth / 20
            found = simple_equivalent(steps, denoise)
            if found is None:
                continue
            folded.append((steps, denoise))
            ours = ksampler_sigmas("simple", ms, *found)
            # the same table entries picked by index: equal exactly, no kernel in between
            assert torch.equal(ours, _comfy_turbo_sigmas(ms, steps, denoise)), (steps, denoise, found)
    assert (1, 1.0) in folded  # the stock template: one step from timestep 999
    assert (3, 0.3) in folded  # ends at timestep 99: "simple" over 10 steps, the last 3
    assert simple_equivalent(2, 1.0) is None  # 999, 899: no "simple" schedule picks those


@pytest.fixture(scope="module")
def shared_registry():
    return default_registry(entry_point_packs=False)  # read-only here: built once (0.5 s)


def _turbo_template() -> dict:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from benchmarks.comfy_templates import templates_folder

    return json.loads((templates_folder() / "sdxlturbo_example.json").read_text(encoding="utf-8"))


def test_the_sdxl_turbo_template_is_a_one_step_simple_sampler(shared_registry) -> None:
    result = import_comfy_data(_turbo_template(), shared_registry, "sdxlturbo", title="sdxlturbo")
    assert result.unsupported == [] and check_comfy(result, shared_registry, "sdxlturbo") == []
    (sampler,) = [n for n in result.workflow["nodes"].values() if n["type"] == "Sampler"]
    assert sampler["params"] == {
        "scheduler": "k_euler_ancestral",
        "sigma_schedule": "simple",
        "steps": 1,
        "cfg": 1,
        "seed": 0,
        "denoise": 1.0,
    }


def test_turbo_on_a_model_that_is_not_sd_stays_unsupported(shared_registry) -> None:
    data = _turbo_template()
    for node in data["nodes"]:
        if node["type"] == "CheckpointLoaderSimple":
            node["widgets_values"] = ["sd3.5_large_turbo.safetensors"]
    result = import_comfy_data(data, shared_registry, "sd3turbo", title="sd3turbo")
    assert "SDTurboScheduler" in {u.class_type for u in result.unsupported}


@pytest.mark.slow
def test_the_sdxl_turbo_template_runs_on_a_tiny_single_file(tmp_path: Path) -> None:
    from diffusers import DiffusionPipeline

    from app.main import main
    from pipelines.diffusion.export import save_sdxl_single_file
    from tests.comfy_layout_support import run_graph
    from tests.demo_support import copy_demo_model
    from tests.template_runs import template_file

    source = template_file("sdxlturbo_example")
    folder = copy_demo_model("tiny-sdxl", tmp_path / "tiny-sdxl")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    models = tmp_path / "ComfyUI" / "models"
    (models / "checkpoints").mkdir(parents=True)
    checkpoint = models / "checkpoints" / "sd_xl_turbo_1.0_fp16.safetensors"
    save_sdxl_single_file(pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, checkpoint)
    imported = tmp_path / "sdxlturbo.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(imported), *dirs]) == 0
    sets = {
        "empty_latent_image.width": 64,
        "empty_latent_image.height": 48,
        "load_checkpoint.config_dir": folder,  # the tiny shapes are no released size
    }
    (picture,) = run_graph(imported, tmp_path / "out", sets, dirs)
    assert picture.shape[:2] == (48, 64) and picture.std() > 1  # one turbo step: a picture, not a flat field
