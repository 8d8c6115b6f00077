"""ComfyUI's most used LTX-2 template, `video_ltx2_3_i2v`, imported and run here on the tiny `demo:tiny-ltx2`
fixture (and `video_ltx2_3_t2v`, the same two stages from an empty latent): both stages (8 then 3 hand-given sigmas), the latent upsampler between them, the in-place first frame
(strength 0.7, then 1), the separate audio latent and its decode, CreateVideo and SaveVideo, the distilled
LoRA (a tiny one in ComfyUI's LTX-2 names, under the template's file name, at the template's strength 0.5)
and the image-to-video template's preview of its prompt (Show Text of the constant).

Two runs: one with the imported graph's loaders replaced by one Load Diffusion Model of the tiny folder, and one
from ComfyUI's own files, the tiny model written under the template's file names (the one-file LTX-2 checkpoint,
the Gemma 3 file, a tiny latent upsampler in the format ComfyUI reads, its config in the file's metadata) and
found with `--models-dir`, as a ComfyUI user's models folder. Both runs bypass the LLM prompt enhancer (off in
the image-to-video template, on in the text-to-video one): the prompt is the enhancer's input text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

templates = pytest.importorskip(
    "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
)

from benchmarks.comfy_templates import templates_folder  # noqa: E402

pytestmark = pytest.mark.slow  # builds and runs the tiny model twice (two stages)

UPSAMPLER = "ltx-2.3-spatial-upscaler-x2-1.1.safetensors"  # the template's LatentUpscaleModelLoader file
LORA = "ltx_2.3_22b_distilled_1.1_lora_dynamic_fro09_avg_rank_111_bf16.safetensors"  # its LoraLoaderModelOnly file
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


def _bypass_prompt_enhancer(nodes: dict) -> None:
    """A prompt wired from the LLM prompt enhancer (TextGenerateLTX2Prompt, on in the text-to-video template) takes
    the enhancer's own input text: the LLM (the Gemma file as an LLM) is not run by these tests."""
    for nid, data in list(nodes.items()):
        for port, link in list(data["inputs"].items()):
            source = nodes.get(link[0]) if isinstance(link, list) else None
            if source is not None and source["type"] == "LLMGenerate":
                if data["type"] == "ShowText":  # the preview of the enhancer's output
                    del nodes[nid]
                    break
                data["params"][port] = source["params"]["prompt"]
                del data["inputs"][port]


def _runnable(workflow: dict, folder: Path, models: Path) -> dict:
    nodes = workflow["nodes"]
    (ckpt,) = [nid for nid, d in nodes.items() if d["type"] == "LoadDiffusionModel"]
    nodes[ckpt]["params"]["path"] = str(folder)
    _bypass_prompt_enhancer(nodes)
    for nid, data in list(nodes.items()):
        kind = data["type"]
        if kind == "LoadLoRA":  # the same LoRA file, on the folder's transformer
            data["params"]["path"] = str(models / "loras" / LORA)
            continue
        if kind == "LoadTextEncoder":
            _rewire(nodes, nid, "text_encoder", [ckpt, "text_encoder"])
        elif kind == "LoadVAE":  # the audio VAE: the folder's VAE carries it
            _rewire(nodes, nid, "vae", [ckpt, "vae"])
        elif kind not in ("LLMGenerate", "LoadLLM"):  # the prompt generator: switched off
            continue
        del nodes[nid]
    for data in nodes.values():
        if data["type"] == "LoadLatentUpsampler":
            data["params"]["path"] = str(models / "latent_upscale_models" / UPSAMPLER)
    _tiny_sizes(nodes)
    return workflow


def _template(name: str) -> dict:
    from nodes.comfy.sources import import_comfy_data
    from nodes.registry import default_registry

    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    result = import_comfy_data(data, default_registry(entry_point_packs=False), "t", title="t")
    assert result.unsupported == []
    return result.workflow


def _from_files(workflow: dict) -> dict:
    """The template as imported, its file names kept: only the prompt enhancer bypassed and the sizes made
    tiny."""
    nodes = workflow["nodes"]
    _bypass_prompt_enhancer(nodes)
    for nid, data in list(nodes.items()):
        if data["type"] in ("LLMGenerate", "LoadLLM"):  # the prompt generator: switched off
            del nodes[nid]
    _tiny_sizes(nodes)
    return workflow


def _tiny_sizes(nodes: dict) -> None:
    for data in nodes.values():
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


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny diffusers folder, a ComfyUI models folder holding it under the templates' file names)."""
    from pipelines.diffusion.comfy_layouts.ltx2_writer import write_ltx2_files
    from pipelines.diffusion.comfy_layouts.template_fixtures import write_lora
    from tests.demo_support import copy_demo_model

    root = tmp_path_factory.mktemp("ltx2-files")
    folder = copy_demo_model("tiny-ltx2", root / "tiny-ltx2")
    models = write_ltx2_files(folder, root / "models")
    (models / "latent_upscale_models").mkdir()
    _save_upsampler(folder, models / "latent_upscale_models" / UPSAMPLER)
    (models / "loras").mkdir()
    write_lora("ltx2", folder, models / "loras" / LORA)  # ComfyUI's LTX-2 names (diffusion_model.*)
    return folder, models


def _run(workflow: dict, out: Path, extra: tuple[str, ...] = ()) -> tuple[Path, list[np.ndarray], np.ndarray]:
    import av

    from tests.family_support import run_workflow

    path = out.with_suffix(".json")
    path.write_text(json.dumps(workflow), encoding="utf-8")
    assert run_workflow(path, out, {}, extra) == 0
    (video,) = out.glob("*.mp4")
    with av.open(str(video)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
    with av.open(str(video)) as container:
        sound = [f.to_ndarray().ravel() for f in container.decode(container.streams.audio[0])]
    return video, frames, np.concatenate(sound) if sound else np.zeros(0)


@pytest.fixture(scope="module")
def folder_runs(tiny: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):
    """template name -> the run of its graph on the tiny folder (once per template)."""
    folder, models = tiny
    done: dict[str, tuple[Path, list[np.ndarray], np.ndarray]] = {}

    def run(name: str) -> tuple[Path, list[np.ndarray], np.ndarray]:
        if name not in done:
            workflow = _runnable(_template(name), folder, models)
            done[name] = _run(workflow, tmp_path_factory.mktemp("folder-run") / "out")
        return done[name]

    return run


def test_video_ltx2_3_i2v_runs_both_stages_with_sound(folder_runs) -> None:
    import av

    video, frames, _ = folder_runs("video_ltx2_3_i2v")
    with av.open(str(video)) as container:
        assert container.streams.audio, "the sound track is saved with the video"
    # Stage 2 runs on the upsampled latent: twice the first stage's size.
    assert len(frames) == FRAMES and (frames[0].shape[1], frames[0].shape[0]) == (2 * WIDTH, 2 * HEIGHT)


@pytest.mark.parametrize("name", ["video_ltx2_3_i2v", "video_ltx2_3_t2v"])
def test_the_ltx2_3_templates_from_comfyuis_files_give_the_folders_video(
    tiny, folder_runs, tmp_path: Path, name: str
) -> None:
    _, models = tiny
    workflow = _from_files(_template(name))
    names = {d["params"].get("path") for d in workflow["nodes"].values()}
    assert {"ltx-2.3-22b-dev-fp8.safetensors", "gemma_3_12B_it_fp4_mixed.safetensors"} <= names
    _, frames, sound = _run(workflow, tmp_path / "out", ("--models-dir", str(models)))
    _, want_frames, want_sound = folder_runs(name)
    assert len(frames) == len(want_frames) == FRAMES
    # The same weights through the same kernels: the frames may differ only by rounding (1 of 255).
    diff = max(
        int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(frames, want_frames, strict=True)
    )
    assert diff <= 1, diff
    # The sound track: the checkpoint's audio VAE and vocoder; AAC-decoded samples of the same waveform (same
    # encoder, same input), so any difference would be a different waveform.
    assert sound.shape == want_sound.shape and np.abs(sound).max() > 0
    np.testing.assert_allclose(sound, want_sound, atol=1e-4)
