"""ComfyUI's ModelSampling* nodes are applied to the sampler's schedule (our Model Sampling Shift), not
reported: the sigmas a flow loop takes follow ComfyUI's formulas (comfy/model_sampling.py v0.8.0,
`time_snr_shift` and `flux_time_shift`; comfy_extras/nodes_model_advanced.py for the Flux mu)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from nodes.comfy.sampling_nodes import sampling_config
from nodes.comfy.sources import import_comfy_data
from pipelines.diffusion.flow_sampling import calculate_shift
from pipelines.diffusion.k_schedules import DiscreteSigmas
from tests.comfy_ids import by_comfy_id

STEPS = 8
GRID = np.linspace(1.0, 1 / STEPS, STEPS)  # the flow loops' t grid (Flux, Qwen-Image)


def _comfy_time_snr_shift(alpha: float, t: float) -> float:
    # comfy/model_sampling.py time_snr_shift
    return t if alpha == 1.0 else alpha * t / (1 + (alpha - 1) * t)


def _comfy_flux_time_shift(mu: float, sigma: float, t: float) -> float:
    # comfy/model_sampling.py flux_time_shift
    return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)


def _loop_sigmas(config: dict, mu: float | None = None) -> list[float]:
    """The sigmas a flow loop steps through, built as the loops build them (from the denoiser's config)."""
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
    scheduler.set_timesteps(sigmas=GRID, mu=mu)
    return scheduler.sigmas[:-1].tolist()


# Qwen-Image's published scheduler: dynamic, exponential time shift, a terminal stretch.
QWEN = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 0.9,
    "base_image_seq_len": 256,
    "max_image_seq_len": 8192,
    "time_shift_type": "exponential",
    "shift_terminal": 0.02,
}


@pytest.mark.parametrize("shift", [1.0, 3.1, 6.0])
@pytest.mark.parametrize("mode", ["sd3", "auraflow"])
def test_a_shift_gives_comfyuis_time_snr_shift(mode: str, shift: float) -> None:
    sigmas = _loop_sigmas(sampling_config(QWEN, mode, shift=shift), mu=0.7)
    expected = [_comfy_time_snr_shift(shift, float(t)) for t in GRID]
    # float32 sigmas in diffusers: a few ulps of 1.0
    assert sigmas == pytest.approx(expected, abs=1e-6)
    if shift != 1.0:  # and it moved the schedule: the same loop unshifted is another list
        assert sigmas != pytest.approx(GRID.tolist(), abs=1e-3)


def test_flux_shifts_by_the_image_size_as_comfyui_computes_it() -> None:
    config = sampling_config(
        {"num_train_timesteps": 1000, "shift": 3.0}, "flux", base_shift=0.5, max_shift=1.4
    )
    width = height = 768
    tokens = (height // 16) * (width // 16)  # Flux: 8x VAE, 2x2 patches
    mu = calculate_shift(tokens, 256, 4096, config["base_shift"], config["max_shift"])  # as sample_flux does
    # ComfyUI's ModelSamplingFlux.patch: shift = (width * height / (8 * 8 * 2 * 2)) * mm + b
    mm = (1.4 - 0.5) / (4096 - 256)
    comfy_mu = (width * height / (8 * 8 * 2 * 2)) * mm + (0.5 - mm * 256)
    assert mu == pytest.approx(comfy_mu, rel=1e-12)
    expected = [_comfy_flux_time_shift(comfy_mu, 1.0, float(t)) for t in GRID]
    assert _loop_sigmas(config, mu=mu) == pytest.approx(expected, abs=1e-6)  # float32 sigmas


def test_zero_terminal_snr_rescales_the_discrete_levels_as_comfyui_does() -> None:
    sd = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}
    plain = DiscreteSigmas.from_scheduler_config(sd).sigmas.double()
    zsnr = DiscreteSigmas.from_scheduler_config(sampling_config(sd, "discrete", zsnr=True)).sigmas
    # comfy/model_sampling.py rescale_zero_terminal_snr_sigmas, written out
    abar_sqrt = (1 / (plain * plain + 1)).sqrt()
    a0, at = abar_sqrt[0].item(), abar_sqrt[-1].item()
    abar = ((abar_sqrt - at) * (a0 / (a0 - at))) ** 2
    abar[-1] = 4.8973451890853435e-08
    expected = ((1 - abar) / abar) ** 0.5
    torch.testing.assert_close(zsnr, expected.float(), rtol=1e-5, atol=0)  # float32 table
    assert float(zsnr[-1]) > 4000 > float(plain[-1])  # the top level is (almost) pure noise now


def _graph(patch: dict) -> dict:
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "qwen_image_fp8.safetensors"}},
        "2": patch | {"inputs": {**patch["inputs"], "model": ["1", 0]}},
        "3": {
            "class_type": "KSampler",
            "inputs": {
                "seed": 1,
                "steps": 8,
                "cfg": 2.5,
                "sampler_name": "euler",
                "scheduler": "simple",
                "denoise": 1.0,
                "model": ["2", 0],
            },
        },
    }


def test_an_imported_model_sampling_node_is_applied_not_reported(registry) -> None:
    result = import_comfy_data(
        _graph({"class_type": "ModelSamplingAuraFlow", "inputs": {"shift": 3.1}}),
        registry,
        "q.json",
        title="q",
    )
    nodes = by_comfy_id(result.workflow)
    assert nodes["2"] == {
        "type": "ModelSamplingShift",
        "params": {"mode": "auraflow", "shift": 3.1},
        "inputs": {"denoiser": ["1", "denoiser"]},
    }
    assert nodes["3"]["inputs"]["denoiser"] == ["2", "denoiser"]
    assert not any("not applied" in str(n) for n in result.notes)
    flux = by_comfy_id(
        import_comfy_data(
            _graph(
                {
                    "class_type": "ModelSamplingFlux",
                    "inputs": {"max_shift": 1.2, "base_shift": 0.4, "width": 512, "height": 768},
                }
            ),
            registry,
            "f.json",
            title="f",
        ).workflow
    )["2"]
    assert flux["params"] == {
        "mode": "flux",
        "max_shift": 1.2,
        "base_shift": 0.4,
        "width": 512,
        "height": 768,
    }
    discrete = by_comfy_id(
        import_comfy_data(
            _graph(
                {"class_type": "ModelSamplingDiscrete", "inputs": {"sampling": "v_prediction", "zsnr": True}}
            ),
            registry,
            "d.json",
            title="d",
        ).workflow
    )["2"]
    assert discrete["params"] == {"mode": "discrete", "prediction": "v_prediction", "zsnr": True}


def test_the_node_hands_on_the_same_model_with_the_patched_schedule(registry) -> None:
    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.values import DenoiserRef

    ref = DenoiserRef(
        handle=None, family=FAMILIES["sd3"], config={"x": 1}, scheduler_config=dict(QWEN), dtype=torch.float32
    )
    out = registry["ModelSamplingShift"].run(
        None,
        denoiser=ref,
        mode="auraflow",
        shift=3.1,
        base_shift=0.5,
        max_shift=1.15,
        width=1024,
        height=1024,
        prediction="keep",
        zsnr=False,
    )["denoiser"]
    assert out.handle is ref.handle and out.config == ref.config and out.family is ref.family
    assert out.scheduler_config["shift"] == 3.1 and out.scheduler_config["use_dynamic_shifting"] is False
    assert ref.scheduler_config == QWEN  # the loader's own ref is untouched (it is cached and shared)


def _comfy_compute_empirical_mu(image_seq_len: int, num_steps: int) -> float:
    # ComfyUI comfy_extras/nodes_flux.py compute_empirical_mu (Flux2Scheduler), re-written as the reference
    a1, b1 = 8.73809524e-05, 1.89833333
    a2, b2 = 0.00016927, 0.45666666
    if image_seq_len > 4300:
        return float(a2 * image_seq_len + b2)
    m_200, m_10 = a2 * image_seq_len + b2, a1 * image_seq_len + b1
    a = (m_200 - m_10) / 190.0
    return float(a * num_steps + m_200 - 200.0 * a)


@pytest.mark.parametrize(("tokens", "steps"), [(1024, 4), (4096, 20), (8192, 28)])
def test_flux2_scheduler_is_the_schedule_our_flux2_loop_computes(tokens: int, steps: int) -> None:
    from pipelines.diffusion.flux2_sampling import compute_empirical_mu

    # ComfyUI: seq_len = width * height / 16^2, the FLUX.2 latent's token count (8x VAE, 2x2 patches).
    assert compute_empirical_mu(image_seq_len=tokens, num_steps=steps) == pytest.approx(
        _comfy_compute_empirical_mu(tokens, steps), rel=1e-9
    )


def test_a_flux2_scheduler_folds_into_our_sampler(registry) -> None:
    graph = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux-2-klein-4b.safetensors"}},
        "2": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen_3_4b.safetensors", "type": "flux2"}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["2", 0]}},
        "4": {
            "class_type": "EmptyFlux2LatentImage",
            "inputs": {"width": 1024, "height": 1024, "batch_size": 1},
        },
        "5": {"class_type": "RandomNoise", "inputs": {"noise_seed": 9}},
        "6": {"class_type": "BasicGuider", "inputs": {"model": ["1", 0], "conditioning": ["3", 0]}},
        "7": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "8": {"class_type": "Flux2Scheduler", "inputs": {"steps": 4, "width": 1024, "height": 1024}},
        "9": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["5", 0],
                "guider": ["6", 0],
                "sampler": ["7", 0],
                "sigmas": ["8", 0],
                "latent_image": ["4", 0],
            },
        },
    }
    result = import_comfy_data(graph, registry, "f2.json", title="f2")
    assert result.unsupported == [] and result.families == []
    sampler = by_comfy_id(result.workflow)["9"]
    assert sampler["type"] == "Sampler"
    assert sampler["params"]["steps"] == 4 and sampler["params"]["cfg"] == 1.0  # BasicGuider: no CFG
    assert sampler["params"]["seed"] == 9 and sampler["params"]["scheduler"] == "k_euler"
    assert any("Flux2Scheduler: FLUX.2's own schedule" in str(n) for n in result.notes)
