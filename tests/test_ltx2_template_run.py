"""ComfyUI's most used LTX-2 template, `video_ltx2_3_i2v`, imported and run here on the tiny `demo:tiny-ltx2`
fixture: both stages (8 then 3 hand-given sigmas), the latent upsampler between them, the in-place first frame
(strength 0.7, then 1), the separate audio latent and its decode, CreateVideo and SaveVideo.

ComfyUI's model files have no loader layout here yet (the one-file LTX-2 checkpoint, the Gemma file, the LoRAs),
so the imported graph's loaders are replaced by one Load Diffusion Model of the tiny folder (the LoRAs bypassed,
the prompt switch left off as the template has it); the latent upsampler is a tiny one in the format ComfyUI
reads (its config in the file's metadata), saved under the template's file name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

templates = pytest.importorskip(
    "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
)

from benchmarks.comfy_templates import templates_folder  # noqa: E402

pytestmark = pytest.mark.slow  # builds and runs the tiny model twice (two stages)

UPSAMPLER = "ltx-2.3-spatial-upscaler-x2-1.1.safetensors"  # the template's LatentUpscaleModelLoader file
# Stage 1 at 64x32 (the template: half of 1280x720), upsampled 2x for stage 2; 9 frames = 1 + 2x4 for the tiny
# 4x-in-time VAE (the template: 5 s x 25 fps + 1).
WIDTH, HEIGHT, FRAMES = 64, 32, 9


def _save_upsampler(folder: Path, path: Path) -> None:
    import torch
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
    from safetensors.torch import save_file

    channels = json.loads((folder / "vae" / "config.json").read_text())["latent_channels"]
    config = {
        "in_channels": channels,
        "mid_channels": 32,  # GroupNorm's 32 groups
        "num_blocks_per_stage": 1,
        "dims": 3,
        "spatial_upsample": True,
        "temporal_upsample": False,
        "use_rational_resampler": False,
    }
    torch.manual_seed(0)
    model = LTX2LatentUpsamplerModel(**config)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps(config)})


def _rewire(nodes: dict, old: str, output: str, new: list[str]) -> None:
    for data in nodes.values():
        for port, link in data["inputs"].items():
            if link == [old, output]:
                data["inputs"][port] = list(new)


def _runnable(workflow: dict, folder: Path, models: Path) -> dict:
    nodes = workflow["nodes"]
    (ckpt,) = [nid for nid, d in nodes.items() if d["type"] == "LoadDiffusionModel"]
    nodes[ckpt]["params"]["path"] = str(folder)
    for nid, data in list(nodes.items()):
        kind = data["type"]
        if kind == "LoadLoRA":  # bypassed: the model (and text encoder) under it
            for output in ("denoiser", "text_encoder"):
                if output in data["inputs"]:
                    _rewire(nodes, nid, output, data["inputs"][output])
        elif kind == "LoadTextEncoder":
            _rewire(nodes, nid, "text_encoder", [ckpt, "text_encoder"])
        elif kind == "LoadVAE":  # the audio VAE: the folder's VAE carries it
            _rewire(nodes, nid, "vae", [ckpt, "vae"])
        elif kind not in ("LLMGenerate", "LoadLLM", "ShowText"):  # the prompt generator: switched off
            continue
        del nodes[nid]
    for data in nodes.values():
        if data["type"] == "LoadLatentUpsampler":
            data["params"]["path"] = str(models / UPSAMPLER)
        if data["type"] == "LoadImage":
            data["params"]["path"] = "builtin:shapes_sample.png"
        if data["type"] == "EmptyLTXVLatentVideo":
            data["params"] |= {"width": WIDTH, "height": HEIGHT, "frames": FRAMES}
        if data["type"] == "LTXVEmptyLatentAudio":
            data["params"]["frames"] = FRAMES
        if data["type"] == "ImageScale":  # the picture's first resize: small, so the CRF pass is quick
            data["params"] |= {"width": 2 * WIDTH, "height": 2 * HEIGHT}
        if data["type"] == "ImageScaleToSide":
            data["params"]["size"] = 2 * WIDTH
    return workflow


def test_video_ltx2_3_i2v_runs_both_stages_with_sound(tmp_path: Path) -> None:
    import av

    from nodes.comfy.sources import import_comfy_data
    from nodes.registry import default_registry
    from pipelines.diffusion.demo_models import save_demo_model
    from tests.family_support import run_workflow

    folder = save_demo_model("tiny-ltx2", tmp_path / "tiny-ltx2")
    models = tmp_path / "models"
    models.mkdir()
    _save_upsampler(folder, models / UPSAMPLER)
    data = json.loads((templates_folder() / "video_ltx2_3_i2v.json").read_text(encoding="utf-8"))
    result = import_comfy_data(data, default_registry(entry_point_packs=False), "t", title="t")
    assert result.unsupported == []
    path = tmp_path / "template.json"
    path.write_text(json.dumps(_runnable(result.workflow, folder, models)), encoding="utf-8")
    assert run_workflow(path, tmp_path / "out", {}) == 0

    (video,) = (tmp_path / "out").glob("*.mp4")
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert container.streams.audio, "the sound track is saved with the video"
    # Stage 2 runs on the upsampled latent: twice the first stage's size.
    assert len(frames) == FRAMES and (frames[0].width, frames[0].height) == (2 * WIDTH, 2 * HEIGHT)
