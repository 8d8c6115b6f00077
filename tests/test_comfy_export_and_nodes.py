"""`app export-comfy` (a workflow of mapped nodes -> ComfyUI API format, and back), and the node types
ComfyUI workflows brought in: SamplerAdvanced (two-stage sampling), ZeroConditioning, image and latent scaling.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.main import main
from memory import MemoryConfig, MemoryManager
from nodes.comfy.export import ExportError, export_api
from nodes.comfy.node_types import NODES
from nodes.comfy.sources import import_comfy
from nodes.workflow import load_workflow, workflow_from_dict
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.resize import resize_image, resize_latent
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.values import Latents

DATA = Path(__file__).resolve().parent / "data" / "comfy"
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["sd15_default.api.json", "api_split_lora_control.json"])
def test_export_of_an_import_gives_back_the_comfy_prompt(name: str, registry, tmp_path: Path) -> None:
    """Round trip, including split loaders (UNET / Dual CLIP / VAE, fp8 weight_dtype), LoRAs, CLIP skip,
    both ControlNet applies, the upscale model, LoadImage's mask, noise mask and inpaint conditioning."""
    original = json.loads((DATA / name).read_text())
    imported = tmp_path / "imported.json"
    assert main(["import", str(DATA / name), "-o", str(imported)]) == 0
    out = tmp_path / "exported.json"
    assert main(["export-comfy", str(imported), str(out)]) == 0
    exported = json.loads(out.read_text())
    # The import's readable ids (the titles) go back to ComfyUI's own ids: the same prompt, id for id.
    assert sorted(exported) == sorted(original)
    assert all(not node["_meta"]["title"].isdigit() for node in exported.values())
    for old, node in original.items():
        new = exported[old]
        assert new["class_type"] == node["class_type"]
        expected = dict(node["inputs"])
        if node["class_type"] == "SaveImage" and name == "sd15_default.api.json":
            expected["filename_prefix"] = "SD1.5"
        assert new["inputs"] == expected, old


def test_export_picks_the_comfy_loader_by_file_count_and_the_lora_by_its_inputs(registry) -> None:
    wf = workflow_from_dict(
        {
            "format": "nodeloom.workflow",
            "version": 1,
            "nodes": {
                "te1": {"type": "LoadTextEncoder", "params": {"path": "clip_l.safetensors", "family": "sd"}},
                "te3": {"type": "LoadTextEncoder", "params": {"path": "a", "path_2": "b", "path_3": "c"}},
                "unet": {"type": "LoadDenoiser", "params": {"path": "u.safetensors", "dtype": "int8"}},
                "lora": {
                    "type": "LoadLoRA",
                    "params": {"path": "l"},
                    "inputs": {"denoiser": ["unet", "denoiser"]},
                },
            },
        },
        registry,
    )
    prompt = {node["_meta"]["title"]: node for node in export_api(wf, registry).values()}
    assert prompt["te1"]["class_type"] == "CLIPLoader"
    assert prompt["te1"]["inputs"] == {"clip_name": "clip_l.safetensors", "type": "stable_diffusion"}
    assert prompt["te3"]["class_type"] == "TripleCLIPLoader"
    assert prompt["te3"]["inputs"] == {"clip_name1": "a", "clip_name2": "b", "clip_name3": "c"}
    assert prompt["unet"]["inputs"] == {"unet_name": "u.safetensors", "weight_dtype": "default"}
    assert prompt["lora"]["class_type"] == "LoraLoaderModelOnly"


def test_export_of_our_own_workflow_uses_nearest_comfy_samplers(registry) -> None:
    wf = load_workflow(REPO / "resources" / "workflows" / "txt2img.json", registry)
    prompt = export_api(wf, registry)
    sampler = next(n for n in prompt.values() if n["class_type"] == "KSampler")
    assert (sampler["inputs"]["sampler_name"], sampler["inputs"]["scheduler"]) == ("dpmpp_2m", "normal")
    # and it imports back to the same graph shape
    path_types = sorted(n["class_type"] for n in prompt.values())
    assert path_types == sorted(
        [
            "CheckpointLoaderSimple",
            "CLIPTextEncode",
            "CLIPTextEncode",
            "EmptyLatentImage",
            "KSampler",
            "VAEDecode",
            "SaveImage",
        ]
    )


def test_export_refuses_nodes_without_a_comfy_counterpart(registry, capsys) -> None:
    wf = load_workflow(REPO / "resources" / "workflows" / "llm.json", registry)
    with pytest.raises(ExportError, match="no ComfyUI counterpart for node"):
        export_api(wf, registry)
    assert main(["export-comfy", str(REPO / "resources" / "workflows" / "llm.json"), "/tmp/never.json"]) == 2
    assert "LLMGenerate" in capsys.readouterr().err


def test_two_stage_advanced_sampling_equals_one_run() -> None:
    """KSamplerAdvanced semantics: steps [0, 2) keeping the leftover noise, then [2, 4) without adding
    noise, is the same deterministic Euler run as all 4 steps at once."""
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        model = load_model(mm, "demo:tiny-sd")
        pos = encode_prompt(mm, model.text_encoder, "a blue square")
        neg = encode_prompt(mm, model.text_encoder, "")
        empty = Latents(torch.zeros(1, 4, 8, 8), 8)
        base = SamplerSettings(scheduler="k_euler", sigma_schedule="karras", steps=4, cfg=4.0, seed=5)
        whole = sample(mm, model.denoiser, pos, neg, empty, base)
        first = SamplerSettings(**{**base.__dict__, "end_step": 2, "force_full_denoise": False})
        second = SamplerSettings(**{**base.__dict__, "start_step": 2, "add_noise": False})
        half = sample(mm, model.denoiser, pos, neg, empty, first)
        both = sample(mm, model.denoiser, pos, neg, half, second)
        # and stopping early with force_full_denoise changes the result (the last sigma becomes 0)
        forced = sample(
            mm, model.denoiser, pos, neg, empty, SamplerSettings(**{**base.__dict__, "end_step": 2})
        )
    # Same ops on the same tensors, but the second half rebuilds its sigma list: a sigma an ulp off would move
    # the latents (|x| up to ~47) by a few ulps of 47 per step (4 steps), not by 1e-5 per element. Seen: 0.
    scale = float(whole.samples.abs().max())
    atol = 4 * 4 * torch.finfo(torch.float32).eps * scale
    torch.testing.assert_close(both.samples, whole.samples, atol=atol, rtol=0)
    assert not torch.allclose(forced.samples, half.samples)


def test_scaling_and_zero_conditioning_nodes() -> None:
    specs = {spec.type: spec for spec in NODES}
    image = torch.rand(1, 16, 24, 3)
    assert resize_image(image, 8, 12, "bilinear").shape == (1, 8, 12, 3)
    assert resize_image(image, 32, 48, "lanczos").shape == (1, 32, 48, 3)
    # center crop to a square keeps the middle columns
    cropped = resize_image(image, 16, 16, "nearest-exact", "center")
    torch.testing.assert_close(cropped, image[:, :, 4:20, :])
    out = specs["ImageScale"].run(None, image=image, method="area", width=12, height=0, crop="disabled")[
        "image"
    ]
    assert out.shape == (1, 8, 12, 3)  # height from the aspect ratio
    latent = Latents(torch.rand(1, 4, 8, 8), 8)
    up = specs["LatentUpscaleBy"].run(None, latent=latent, method="bicubic", scale=1.5)["latent"]
    assert up.samples.shape == (1, 4, 12, 12) and up.vae_scale_factor == 8
    assert resize_latent(latent.samples, 4, 4, "area").shape == (1, 4, 4, 4)
    with pytest.raises(ValueError, match="lanczos works on images"):
        resize_latent(latent.samples, 4, 4, "lanczos")
    from pipelines.diffusion.values import Conditioning

    cond = Conditioning(embeds=torch.ones(1, 3, 4), family="sdxl", pooled=torch.ones(1, 2), text="x")
    zero = specs["ZeroConditioning"].run(None, conditioning=cond)["conditioning"]
    assert zero.embeds.abs().sum() == 0 and zero.pooled.abs().sum() == 0 and zero.family == "sdxl"


def test_imported_ui_workflow_validates_as_a_nodeloom_workflow(registry) -> None:
    result = import_comfy(REPO / "tests" / "data" / "comfy" / "real" / "sd15_default.json", registry)
    wf = workflow_from_dict(result.workflow, registry)
    assert (
        wf.nodes["ksampler"].params["scheduler"] == "k_euler"
        and wf.nodes["ksampler"].params["sigma_schedule"] == "normal"
    )
    assert wf.ui["nodes"]["ksampler"]["pos"] == [920.0, 170.0]
    assert [g["title"] for g in wf.ui["groups"]] == [
        "Step 1 - Load model",
        "Step 3 - Image size",
        "Step 2 - Prompt",
    ]
