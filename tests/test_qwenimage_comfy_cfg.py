"""An imported ComfyUI Qwen-Image graph guides as ComfyUI does: plain CFG, and CFGNorm in x0 space where the
graph has one (the Sampler's `cfg_rule`, `pipelines.diffusion.guidance`); a native graph keeps diffusers' rule.

ComfyUI's side is written out here from its source (comfy/samplers.py `cfg_function`, comfy_extras/nodes_cfg.py
`CFGNorm`), in its own latent layout: each loop's tokens are unpacked with the diffusers pipeline's own
`_unpack_latents` ((B, C, 1, h, w), the layout ComfyUI's Qwen-Image latents have), so the test checks the
layout the norm is taken over as well as the formula.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nodes.comfy.export import export_api
from nodes.comfy.sources import import_comfy_data
from nodes.workflow import workflow_from_dict
from pipelines.diffusion import qwenimage21_sampling, qwenimage_sampling
from pipelines.diffusion.guidance import cfg_norm, check_cfg_rule, comfy_guidance, runs_negative
from tests.family_support import Txt2Img, demo_folder

PROMPT = "a small yellow triangle on a black background"
NEGATIVE = "blurry bad quality"
WIDTH, HEIGHT = 40, 56  # odd patch counts (5 x 7): nothing assumes square
folder = demo_folder("tiny-qwenimage")
qwen21_folder = demo_folder("tiny-qwenimage21", scope="session")
ours = Txt2Img(PROMPT, NEGATIVE, WIDTH, HEIGHT)


def comfy_cfg_norm(denoised: torch.Tensor, cond_denoised: torch.Tensor, strength: float) -> torch.Tensor:
    """ComfyUI's CFGNorm post-CFG function (comfy_extras/nodes_cfg.py), as it is written there."""
    norm_full_cond = torch.norm(cond_denoised, dim=1, keepdim=True)
    norm_pred_text = torch.norm(denoised, dim=1, keepdim=True)
    scale = (norm_full_cond / (norm_pred_text + 1e-8)).clamp(min=0.0, max=1.0)
    return denoised * scale * strength


def comfy_step_velocity(
    cond_v: torch.Tensor, uncond_v: torch.Tensor, x: torch.Tensor, sigma: float, cfg: float, strength: float
) -> torch.Tensor:
    """What ComfyUI's Euler steps with, as a velocity: the model's x0s (`x - sigma * v`, CONST), its CFG there,
    CFGNorm, and Euler's `d = (x - denoised) / sigma`."""
    cond, uncond = x - sigma * cond_v, x - sigma * uncond_v
    denoised = comfy_cfg_norm(uncond + (cond - uncond) * cfg, cond, strength)
    return (x - denoised) / sigma


def test_cfg_norm_is_comfyuis_formula_with_its_clamp_and_strength() -> None:
    gen = torch.Generator().manual_seed(0)
    cond = torch.randn(2, 16, 5, 7, generator=gen)
    # Half the pixels guided far from the conditional x0 (norm above it: scaled down), half shrunk toward 0
    # (norm below it: the clamp at 1 leaves them as they are).
    guided = cond * 3.0 + torch.randn(2, 16, 5, 7, generator=gen)
    guided[..., :3] = cond[..., :3] * 0.5
    ratio = cond.norm(dim=1) / guided.norm(dim=1)
    assert (ratio < 1).any() and (ratio > 1).any()  # both branches of the clamp are taken
    for strength in (1.0, 0.7):
        # The same float ops in the same order as ComfyUI's: equal to the bit.
        assert torch.equal(cfg_norm(guided, cond, strength), comfy_cfg_norm(guided, cond, strength))
    kept = cfg_norm(guided, cond, 1.0)[..., :3]
    assert torch.allclose(kept, guided[..., :3], rtol=1e-6)  # clamped pixels: only the 1e-8 in the ratio


def test_comfy_guidance_works_in_x0_space_as_comfyui_does() -> None:
    gen = torch.Generator().manual_seed(1)
    cond, uncond, x = (torch.randn(1, 16, 4, 6, generator=gen) for _ in range(3))
    same = (lambda z: z), (lambda z: z)  # already ComfyUI's (B, C, h, w)
    ours_v = comfy_guidance("comfyui_cfgnorm", 4.0, 0.8, cond, uncond, x, 0.6, *same)
    # Equal in exact arithmetic (the combination is linear, so v or x0 space alike); float32 rounding of values
    # of order 10 through x - sigma * v and back leaves them ~1e-6 apart.
    assert torch.allclose(ours_v, comfy_step_velocity(cond, uncond, x, 0.6, 4.0, 0.8), atol=1e-5)
    plain = comfy_guidance("comfyui", 4.0, 0.8, cond, uncond, x, 0.6, *same)
    assert torch.equal(plain, uncond + 4.0 * (cond - uncond))  # the same sum: to the bit
    assert not torch.allclose(plain, ours_v, atol=1e-3)  # CFGNorm scaled the guided x0 down


def test_comfyuis_rule_runs_the_negative_unless_cfg_is_1() -> None:
    assert runs_negative("comfyui", 0.5, True) and not runs_negative("pipeline", 0.5, True)
    assert not runs_negative("comfyui", 1.0, True) and not runs_negative("comfyui", 4.0, False)
    assert runs_negative("pipeline", 4.0, True)


def test_other_families_refuse_comfyuis_rule_by_name() -> None:
    check_cfg_rule("comfyui_cfgnorm", "qwenimage21", "Qwen-Image 2.1")
    with pytest.raises(ValueError, match=r"cfg_rule 'comfyui'.*SDXL.*set cfg_rule to pipeline"):
        check_cfg_rule("comfyui", "unet", "SDXL")
    with pytest.raises(ValueError, match="cfg_rule 'plain': one of pipeline, comfyui, comfyui_cfgnorm"):
        check_cfg_rule("plain", "qwenimage", "Qwen-Image")


class _Steps:
    """What the loop fed its scheduler each step (velocity, timestep, sample) and the transformer's outputs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from diffusers import FlowMatchEulerDiscreteScheduler

        self.steps: list[tuple[torch.Tensor, float, torch.Tensor, float]] = []
        self.predictions: list[torch.Tensor] = []
        step, predict = FlowMatchEulerDiscreteScheduler.step, qwenimage_sampling._predict

        def record_step(scheduler: Any, output: torch.Tensor, t: Any, sample: torch.Tensor, **kw: Any) -> Any:
            index = (
                scheduler.step_index if scheduler.step_index is not None else scheduler.index_for_timestep(t)
            )
            self.steps.append((output.clone(), float(t), sample.clone(), float(scheduler.sigmas[index])))
            return step(scheduler, output, t, sample, **kw)

        def record_predict(*args: Any, **kw: Any) -> torch.Tensor:
            out = predict(*args, **kw)
            self.predictions.append(out.clone())
            return out

        monkeypatch.setattr(FlowMatchEulerDiscreteScheduler, "step", record_step)
        monkeypatch.setattr(qwenimage_sampling, "_predict", record_predict)


def _unpack(z: torch.Tensor) -> torch.Tensor:
    """The loop's packed tokens -> ComfyUI's Qwen-Image latent (B, C, 1, h, w), by diffusers' own unpacking."""
    from diffusers import QwenImagePipeline

    return QwenImagePipeline._unpack_latents(z, HEIGHT // 4, WIDTH // 4, 1)  # the tiny VAE: 4 px a latent


def test_the_plain_rule_is_comfyuis_sum_each_step_not_true_cfg(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Steps(monkeypatch)
    ours(folder, tmp_path / "comfy", cfg=4.0, extra=("--set", "sampler.cfg_rule=comfyui"))
    assert len(spy.steps) == 3 and len(spy.predictions) == 6  # a positive and a negative call a step
    for i, (velocity, _, _, _) in enumerate(spy.steps):
        pos, neg = spy.predictions[2 * i], spy.predictions[2 * i + 1]
        assert torch.equal(velocity, neg + 4.0 * (pos - neg))  # the same sum, to the bit
        # diffusers' rule rescales each token to the positive's norm: on these random weights, far apart.
        rescaled = qwenimage_sampling.true_cfg(pos, neg, 4.0)
        assert (velocity - rescaled).abs().max() > 1e-2 * rescaled.abs().max()


def test_cfg_norm_rescales_x0_per_latent_pixel_in_the_qwenimage_loop(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Steps(monkeypatch)
    sets = ("--set", "sampler.cfg_rule=comfyui_cfgnorm", "--set", "sampler.cfg_norm=0.8")
    ours(folder, tmp_path / "norm", cfg=4.0, extra=sets)
    for i, (velocity, _, x, sigma) in enumerate(spy.steps):
        pos, neg = spy.predictions[2 * i], spy.predictions[2 * i + 1]
        theirs = comfy_step_velocity(_unpack(pos), _unpack(neg), _unpack(x), sigma, 4.0, 0.8)
        # x0 = x - sigma v and back in float32 on values of order 10: ~1e-6 apart; 1e-4 leaves room.
        assert torch.allclose(_unpack(velocity), theirs, atol=1e-4)
        assert not torch.allclose(velocity, neg + 4.0 * (pos - neg), atol=1e-3)  # CFGNorm did something


def test_cfg_norm_in_the_qwenimage21_loop_sees_comfyuis_latent_layout(
    qwen21_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diffusers import QwenImage21Pipeline

    calls: list[tuple[torch.Tensor, ...]] = []
    real = qwenimage21_sampling.comfy_guidance

    def record(rule: str, cfg: float, strength: float, cond: Any, uncond: Any, x: Any, sigma: float, *a: Any):
        out = real(rule, cfg, strength, cond, uncond, x, sigma, *a)
        calls.append((cond, uncond, x, torch.tensor(sigma), out))
        return out

    monkeypatch.setattr(qwenimage21_sampling, "comfy_guidance", record)
    sets = ("--set", "sampler.cfg_rule=comfyui_cfgnorm", "--set", "sampler.cfg_norm=0.9")
    Txt2Img(PROMPT, NEGATIVE, 64, 96, read=lambda out: np.zeros(1))(
        qwen21_folder, tmp_path, cfg=3.0, extra=sets
    )
    assert len(calls) == 3
    for cond, uncond, x, sigma, out in calls:
        unflat = lambda z: QwenImage21Pipeline._unpack_latents(z, 96 // 16, 64 // 16, 1)  # noqa: E731
        theirs = comfy_step_velocity(unflat(cond), unflat(uncond), unflat(x), float(sigma), 3.0, 0.9)
        assert torch.allclose(unflat(out), theirs, atol=1e-4)  # float32 through x0 and back, as above


@pytest.mark.slow  # imports and runs ComfyUI's template twice on the tiny model (a few seconds each)
def test_an_imported_qwen_image_graph_at_cfg_4_gives_the_plain_cfg_picture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.comfy_layout_support import comfy_fixture, run_graph
    from tests.template_runs import import_template, max_diff, place_under_template_names

    name = "image_qwen_Image_2512"
    _, root = comfy_fixture("qwenimage", tmp_path / "fixture")
    models = root / "models"
    place_under_template_names(name, "qwenimage", models)
    imported = tmp_path / f"{name}.nodeloom.json"
    workflow = import_template(name, models, imported)
    assert workflow["nodes"]["ksampler"]["params"]["cfg_rule"] == "comfyui"
    sets = {"ksampler.steps": 3, "ksampler.seed": 42, "ksampler.cfg": 4.0}
    sets |= {"empty_sd3_latent_image.width": WIDTH, "empty_sd3_latent_image.height": HEIGHT}
    dirs = ("--models-dir", str(models))
    comfy = run_graph(imported, tmp_path / "comfy", sets, dirs)
    diffusers_rule = run_graph(
        imported, tmp_path / "pipeline", {**sets, "ksampler.cfg_rule": "pipeline"}, dirs
    )
    # The reference: our loop on diffusers' rule with its combination swapped for ComfyUI's plain sum.
    monkeypatch.setattr(qwenimage_sampling, "true_cfg", lambda pos, neg, cfg: neg + cfg * (pos - neg))
    reference = run_graph(imported, tmp_path / "ref", {**sets, "ksampler.cfg_rule": "pipeline"}, dirs)
    assert comfy[0].std() > 5  # a real picture
    assert max_diff(comfy, reference) == 0  # the same float ops in the same order: the same picture
    # diffusers' rule is another picture. On the tiny random model the tiny VAE keeps the two close (at most
    # 2/255 apart was seen), but about 13% of the pixels move; the reference above moves none.
    assert (comfy[0] != diffusers_rule[0]).mean() > 0.05


def _template(name: str) -> Any:
    pytest.importorskip("comfyui_workflow_templates_json")
    from benchmarks.comfy_templates import templates_folder

    return json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))


def test_the_2511_edit_templates_cfg_norm_is_applied_and_exports_back(registry) -> None:
    name = "image_qwen_image_edit_2511"
    result = import_comfy_data(_template(name), registry, name, title=name)
    notes = [str(n) for n in result.notes]
    assert not any("CFGNorm" in n and "approximated" in n for n in notes), notes
    assert any("cfg_rule comfyui_cfgnorm" in n and "CFGNorm (node cfg_norm, strength 1)" in n for n in notes)
    sampler = result.workflow["nodes"]["ksampler"]
    assert (sampler["params"]["cfg_rule"], sampler["params"]["cfg_norm"]) == ("comfyui_cfgnorm", 1.0)
    prompt = export_api(workflow_from_dict(result.workflow, registry), registry)
    (ksampler,) = [n for n in prompt.values() if n["class_type"] == "KSampler"]
    norm = prompt[ksampler["inputs"]["model"][0]]
    assert norm["class_type"] == "CFGNorm" and norm["inputs"]["strength"] == 1.0
    assert prompt[norm["inputs"]["model"][0]]["class_type"] == "ModelSamplingAuraFlow"
    again = import_comfy_data(prompt, registry, name, title=name)
    (back,) = [n for n in again.workflow["nodes"].values() if n["type"] == "Sampler"]
    assert (back["params"]["cfg_rule"], back["params"]["cfg_norm"]) == ("comfyui_cfgnorm", 1.0)


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("image_qwen_Image_2512", "comfyui"),
        ("image_qwen_image_edit_2509", "comfyui_cfgnorm"),
        ("image_qwen_image_2_1_t2i", "comfyui"),
        ("image_longcat_text_to_image", None),  # not a Qwen-Image model: its CFGNorm stays a note
    ],
)
def test_each_qwen_image_templates_sampler_carries_comfyuis_rule(
    name: str, rule: str | None, registry
) -> None:
    result = import_comfy_data(_template(name), registry, name, title=name)
    samplers = [n for n in result.workflow["nodes"].values() if n["type"] in ("Sampler", "SamplerAdvanced")]
    assert samplers and all(s["params"].get("cfg_rule") == rule for s in samplers)
    approximated = [str(n) for n in result.notes if "CFGNorm" in str(n) and "approximated" in str(n)]
    assert bool(approximated) == (rule is None and name == "image_longcat_text_to_image"), approximated
