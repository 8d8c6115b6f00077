"""ComfyUI's LTX-2 steps as Nodeloom nodes, on the tiny `demo:tiny-ltx2` fixture: a graph written the way the
templates write it (Empty LTXV Latent Video + Empty LTXV Audio Latent + Concat, LTXV Preprocess + in-place first
frame, LTX-2 Guidance with the pipeline's terms, a Manual Sigmas list, Separate, LTXV Decode Frames) gives the
frames of our native `img2video_ltx2.json` when the list is the native schedule; and the schedule arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.diffusion.manual_sigmas import check_sigmas, ltxv_scheduler_sigmas, parse_sigmas

REPO = Path(__file__).resolve().parent.parent
IMG2VIDEO = REPO / "resources/workflows/img2video_ltx2.json"
WIDTH, HEIGHT, FRAMES, FPS, STEPS = 64, 32, 9, 24.0, 3  # as tests/test_family_ltx2.py: 32-multiples, 1 + 4k


def test_manual_sigmas_text_is_read_as_comfyui_reads_it() -> None:
    assert parse_sigmas("1.0, 0.7250, 0.4219, 0.0") == (1.0, 0.725, 0.4219, 0.0)
    for bad in ("1.0", "0.5, 0.9, 0.0", ""):
        with pytest.raises(ValueError, match="field 'sigmas'"):
            parse_sigmas(bad)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        check_sigmas((14.6, 1.0, 0.0), "input 'sigmas'", flow=True)  # k-diffusion levels: not a flow schedule


def test_ltxv_scheduler_stretches_to_its_terminal() -> None:
    sigmas = ltxv_scheduler_sigmas(20, 2.05, 0.95, True, 0.1, 4096)
    assert len(sigmas) == 21 and sigmas[0] == pytest.approx(1.0) and sigmas[-1] == 0.0
    assert sigmas[-2] == pytest.approx(0.1, abs=1e-6)  # float32 arithmetic of the stretch
    assert all(b < a for a, b in zip(sigmas, sigmas[1:], strict=False))


def _native_sigmas(folder: Path, data_dir: Path) -> str:
    """The native loop's schedule for this size (the pipeline's linspace, shifted by the video token count)."""
    import torch

    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.ltx2_sampling import calculate_shift
    from pipelines.diffusion.schedulers import make_scheduler

    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=data_dir)) as mm:
        denoiser = load_model(mm, str(folder)).denoiser
    p, pt = int(denoiser.config.get("patch_size", 1)), int(denoiser.config.get("patch_size_t", 1))
    tokens = ((FRAMES - 1) // 4 + 1) // pt * (HEIGHT // 4 // p) * (WIDTH // 4 // p)  # the tiny VAE: 4x
    scheduler = make_scheduler("default", denoiser.scheduler_config)
    c = scheduler.config
    mu = calculate_shift(
        tokens,
        c.get("base_image_seq_len", 1024),
        c.get("max_image_seq_len", 4096),
        c.get("base_shift", 0.95),
        c.get("max_shift", 2.05),
    )
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / STEPS, STEPS), mu=mu)
    levels = scheduler.sigmas.to(torch.float32).tolist()
    return ", ".join(f"{s:.9f}" for s in levels)  # float32 values survive 9 decimals


def _comfy_style_workflow(folder: Path, sigmas: str) -> dict:
    def node(type_: str, params: dict | None = None, **inputs: list[str]) -> dict:
        return {"type": type_, "params": params or {}, "inputs": inputs}

    guidance = {
        "audio_cfg": 7.0,
        "stg_scale": 1.0,
        "audio_stg_scale": 1.0,
        "modality_scale": 3.0,
        "audio_modality_scale": 3.0,
        "rescale": 0.7,
        "audio_rescale": 0.7,
    }  # the pipeline's terms
    return {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "load": node("LoadDiffusionModel", {"path": str(folder)}),
            "image": node("LoadImage", {"path": "builtin:shapes_sample.png"}),
            "positive": node(
                "TextEncode",
                {"text": "a small yellow square moving on a black background"},
                text_encoder=["load", "text_encoder"],
            ),
            "negative": node(
                "TextEncode", {"text": "blurry static bad quality"}, text_encoder=["load", "text_encoder"]
            ),
            "video": node(
                "EmptyLTXVLatentVideo",
                {"width": WIDTH, "height": HEIGHT, "frames": FRAMES, "fps": FPS},
                vae=["load", "vae"],
            ),
            "audio": node("LTXVEmptyLatentAudio", {"frames": FRAMES, "fps": FPS}, vae=["load", "vae"]),
            "pre": node("LTXVPreprocess", {"img_compression": 33}, image=["image", "image"]),
            "inplace": node(
                "LTXVImgToVideoInplace",
                {},
                vae=["load", "vae"],
                image=["pre", "image"],
                latent=["video", "latent"],
            ),
            "av": node(
                "LTXVConcatAVLatent", {}, video_latent=["inplace", "latent"], audio_latent=["audio", "latent"]
            ),
            "guidance": node("LTX2Guidance", guidance, denoiser=["load", "denoiser"]),
            "sigmas": node("ManualSigmas", {"sigmas": sigmas}),
            "sampler": node(
                "Sampler",
                {"scheduler": "default", "steps": STEPS, "cfg": 3.0, "seed": 42, "preview_every": 0},
                denoiser=["guidance", "denoiser"],
                positive=["positive", "conditioning"],
                negative=["negative", "conditioning"],
                latent=["av", "latent"],
                sigmas=["sigmas", "sigmas"],
            ),
            "split": node("LTXVSeparateAVLatent", {}, av_latent=["sampler", "latent"]),
            "frames": node("LTXVDecodeFrames", {}, vae=["load", "vae"], latent=["split", "video_latent"]),
            "save": node("SaveImage", {"prefix": "frame"}, image=["frames", "image"]),
        },
    }


@pytest.mark.slow
def test_the_template_shaped_graph_gives_the_native_img2video_frames(tmp_path: Path) -> None:
    from PIL import Image

    from tests.demo_support import copy_demo_model
    from tests.family_support import run_workflow

    folder = copy_demo_model("tiny-ltx2", tmp_path / "tiny-ltx2")
    sets = {
        "load.path": str(folder),
        "sampler.steps": STEPS,
        "latent.width": WIDTH,
        "latent.height": HEIGHT,
        "latent.frames": FRAMES,
        "save.format": "png",
        "save.prefix": "frame",
    }
    assert run_workflow(IMG2VIDEO, tmp_path / "native", sets) == 0
    workflow = tmp_path / "comfy_style.json"
    workflow.write_text(
        json.dumps(_comfy_style_workflow(folder, _native_sigmas(folder, tmp_path / "mm"))), encoding="utf-8"
    )
    assert run_workflow(workflow, tmp_path / "comfy", {}) == 0

    def frames(folder_: Path) -> np.ndarray:
        return np.stack([np.asarray(Image.open(p)) for p in sorted(folder_.glob("*.png"))]).astype(int)

    native, ours = frames(tmp_path / "native"), frames(tmp_path / "comfy")
    assert native.shape == ours.shape == (FRAMES, HEIGHT, WIDTH, 3)
    # The same float32 ops on the same noise; the schedule passes through 9-decimal text (|d sigma| < 5e-10):
    # at most one uint8 level of rounding apart.
    assert np.abs(native - ours).max() <= 1


def _custom_sampler_graph(sigmas: dict) -> dict:
    """An API-format LTX-2 graph (its AV latent nodes make it one) with one custom sampler."""
    return {
        "1": {
            "class_type": "CheckpointLoaderSimple",
            "inputs": {"ckpt_name": "ltx-2.3-22b-dev-fp8.safetensors"},
        },
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["1", 1]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 1]}},
        "4": {
            "class_type": "EmptyLTXVLatentVideo",
            "inputs": {"width": 64, "height": 32, "length": 9, "batch_size": 1},
        },
        "5": {
            "class_type": "LTXVEmptyLatentAudio",
            "inputs": {"frames_number": 9, "frame_rate": 24, "audio_vae": ["1", 2]},
        },
        "6": {
            "class_type": "LTXVConcatAVLatent",
            "inputs": {"video_latent": ["4", 0], "audio_latent": ["5", 0]},
        },
        "7": {
            "class_type": "CFGGuider",
            "inputs": {"cfg": 2.5, "model": ["1", 0], "positive": ["2", 0], "negative": ["3", 0]},
        },
        "8": {"class_type": "RandomNoise", "inputs": {"noise_seed": 7}},
        "9": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "10": sigmas,
        "11": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["8", 0],
                "guider": ["7", 0],
                "sampler": ["9", 0],
                "sigmas": ["10", 0],
                "latent_image": ["6", 0],
            },
        },
    }


@pytest.mark.parametrize(
    "sigmas",
    [
        {"class_type": "ManualSigmas", "inputs": {"sigmas": "1.0, 0.6, 0.0"}},
        {
            "class_type": "BasicScheduler",
            "inputs": {"scheduler": "simple", "steps": 5, "denoise": 1.0, "model": ["1", 0]},
        },
    ],
)
def test_an_ltx2_custom_sampler_takes_its_guider_as_ltx2_guidance(sigmas: dict) -> None:
    from nodes.comfy.sources import check_comfy, import_comfy_data
    from nodes.registry import default_registry

    registry = default_registry(entry_point_packs=False)
    result = import_comfy_data(_custom_sampler_graph(sigmas), registry, "g.json", title="g")
    assert result.unsupported == [] and check_comfy(result, registry, "g.json") == []
    nodes = result.workflow["nodes"]
    (sampler,) = [d for d in nodes.values() if d["type"] == "Sampler"]
    guidance = nodes[sampler["inputs"]["denoiser"][0]]
    assert guidance["type"] == "LTX2Guidance" and guidance["params"]["audio_cfg"] == 2.5
    assert sampler["params"]["cfg"] == 2.5 and sampler["params"]["seed"] == 7
    if sigmas["class_type"] == "ManualSigmas":
        assert nodes[sampler["inputs"]["sigmas"][0]]["params"]["sigmas"] == "1.0, 0.6, 0.0"
        assert sampler["params"]["steps"] == 2
    else:  # a named schedule: steps, no SIGMAS wire
        assert "sigmas" not in sampler["inputs"] and sampler["params"]["steps"] == 5
