"""ComfyUI's MiniMax H3 workflows: the published templates import with every node mapped, and a ComfyUI graph
of the same nodes runs here with the modular pipeline's frames.

The templates come from the `comfyui-workflow-templates-json` package (skipped without it). The run builds a
small API-format graph the way the templates wire MiniMax H3 (MiniMaxH3ImageToVideo -> SamplerCustomAdvanced
with BasicGuider -> VAEDecode + VAEDecodeAudio -> CreateVideo -> SaveVideo), with a CheckpointLoaderSimple
naming the tiny diffusers folder in place of the three single-file loaders (those files' layouts are not read
here yet), imports it with `app import` and runs it with `app --run`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.main import main
from nodes.comfy.sources import import_comfy_data
from tests.family_support import frames_in


def _template(name: str) -> dict:
    package = pytest.importorskip("comfyui_workflow_templates_json")
    from importlib import resources

    del package
    path = Path(str(resources.files("comfyui_workflow_templates_json") / "templates")) / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["video_minimax_h3_t2v", "video_minimax_h3_i2v", "image_minimax_h3_t2i"])
def test_the_minimax_templates_map_every_node_and_the_family_runs(registry, name: str) -> None:
    result = import_comfy_data(_template(name), registry, name, title=name)
    assert [u.class_type for u in result.unsupported] == []
    assert [p.family for p in result.families] == []  # minimax is a family Nodeloom runs
    types = {node["type"] for node in result.workflow["nodes"].values()}
    assert "LoadDenoiser" in types and "Sampler" in types
    if name != "image_minimax_h3_t2i":
        assert {"MiniMaxH3ImageToVideo", "VAEDecodeAudio", "CreateVideo"} <= types


@pytest.mark.parametrize("name", ["video_minimax_h3_t2v", "video_minimax_h3_i2v", "video_minimax_h3_r2v"])
def test_app_check_passes_the_minimax_video_templates(tmp_path: Path, name: str) -> None:
    """`app check` is clean: every node mapped, the family runnable; the i2v template's dangling
    ImageScaleToTotalPixels (its input unwired, its output read by nothing an output needs) is skipped, as
    ComfyUI and a Run skip it."""
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(_template(name)), encoding="utf-8")
    assert main(["check", str(path)]) == 0


def test_reference_to_video_maps_its_pictures_and_refuses_videos_and_sounds(registry) -> None:
    """The r2v template's two Autogrow pictures (`ref_images.ref_image_0`, `_1`) become ref_image_1 / _2 in
    order, with its widgets (ref_image_size included) and the audio VAE wire; a reference video or sound wired
    (not read here yet) is refused with that reason."""
    name = "video_minimax_h3_r2v"
    data = _template(name)
    result = import_comfy_data(data, registry, name, title=name)
    assert result.unsupported == [] and result.families == []
    (node,) = [n for n in result.workflow["nodes"].values() if n["type"] == "MiniMaxH3ReferenceToVideo"]
    assert set(node["inputs"]) == {"text_encoder", "vae", "audio_vae", "ref_image_1", "ref_image_2"}
    assert node["params"]["ref_image_size"] == "match" and "<Picture 2>" in node["params"]["text"]
    sources = [
        result.workflow["nodes"][node["inputs"][f"ref_image_{i}"][0]]["params"]["path"] for i in (1, 2)
    ]
    assert sources == ["red_superboy_on_city_roof.png", "mecha_dragon_lightning.png"]  # ref_image_0, _1

    for raw in data["nodes"]:
        if raw["type"] == "MiniMaxH3ReferenceToVideo":
            video = next(i for i in raw["inputs"] if i["name"] == "ref_videos.ref_video_0")
            video["link"] = next(i for i in raw["inputs"] if i["name"] == "ref_images.ref_image_0")["link"]
    (only,) = import_comfy_data(data, registry, name, title=name).unsupported
    assert only.class_type == "MiniMaxH3ReferenceToVideo" and "ref_videos.ref_video_0" in str(only)


def _api_graph(folder: Path, seed: int, shifts: tuple[float, float] = (12.0, 3.0)) -> dict:
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": str(folder)}},
        "2": {
            "class_type": "MiniMaxH3ImageToVideo",
            "inputs": {
                "clip": ["1", 1],
                "vae": ["1", 2],
                "prompt": PROMPT,
                "width": 48,
                "height": 32,
                "length": 124,
            },
        },
        "3": {
            "class_type": "MiniMaxH3SigmaShift",
            "inputs": {"model": ["1", 0], "shift_video": shifts[0], "shift_audio": shifts[1]},
        },
        "4": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "5": {"class_type": "BasicGuider", "inputs": {"model": ["3", 0], "conditioning": ["2", 0]}},
        "6": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "7": {
            "class_type": "BasicScheduler",
            "inputs": {"model": ["3", 0], "scheduler": "simple", "steps": 2, "denoise": 1.0},
        },
        "8": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["4", 0],
                "guider": ["5", 0],
                "sampler": ["6", 0],
                "sigmas": ["7", 0],
                "latent_image": ["2", 1],
            },
        },
        "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["1", 2]}},
        "10": {"class_type": "VAEDecodeAudio", "inputs": {"samples": ["8", 0], "vae": ["1", 2]}},
        "11": {"class_type": "CreateVideo", "inputs": {"images": ["9", 0], "audio": ["10", 0], "fps": 24}},
        "12": {
            "class_type": "SaveVideo",
            "inputs": {"video": ["11", 0], "filename_prefix": "h3", "format": "auto", "codec": "auto"},
        },
    }


PROMPT = "a small yellow square moving on a black background"


@pytest.mark.slow  # builds the tiny model and runs two videos
def test_a_comfyui_minimax_graph_runs_with_the_pipelines_frames_and_sound(tmp_path: Path) -> None:
    from pipelines.diffusion.demo_models import save_demo_model
    from tests.minimax_reference import reference_video

    models = tmp_path / "models"  # an imported workflow names files inside the models folders only
    folder = save_demo_model("tiny-minimax", models / "checkpoints" / "tiny-minimax")
    graph = tmp_path / "h3_api.json"
    graph.write_text(json.dumps(_api_graph(Path("tiny-minimax"), 42)), encoding="utf-8")
    ours = tmp_path / "h3.nodeloom.json"
    assert main(["import", str(graph), "-o", str(ours), "--models-dir", str(models)]) == 0
    out = tmp_path / "out"
    run = ["--run", str(ours), "--quiet", "--device", "cpu", "--models-dir", str(models)]
    assert main([*run, "--out", str(out), "--set", "save_video.format=png"]) == 0
    expected, _, _ = reference_video(
        folder, prompt=PROMPT, num_inference_steps=3, height=32, width=48, num_frames=124
    )
    frames = frames_in(out)
    assert frames.shape == expected.shape and expected.std() > 5
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 for a rounding edge.
    assert np.abs(frames.astype(int) - expected.astype(int)).max() <= 1

    mp4 = tmp_path / "mp4"
    assert main([*run, "--out", str(mp4)]) == 0
    import av

    (path,) = mp4.iterdir()
    with av.open(str(path)) as container:  # the sound track VAE Decode Audio made, muxed by Create Video
        (stream,) = container.streams.audio
        assert stream.channels == 2


@pytest.mark.slow  # builds the tiny model and runs one video
def test_the_sigma_shift_node_sets_the_pipelines_shifts(tmp_path: Path) -> None:
    """MiniMaxH3SigmaShift at (6, 2): the pipeline's schedules with `set_shift(6)` / `set_shift(2)`."""
    from pipelines.diffusion.demo_models import save_demo_model
    from tests.minimax_reference import reference_video

    models = tmp_path / "models"
    folder = save_demo_model("tiny-minimax", models / "checkpoints" / "tiny-minimax")
    graph = tmp_path / "h3_api.json"
    graph.write_text(json.dumps(_api_graph(Path("tiny-minimax"), 42, (6.0, 2.0))), encoding="utf-8")
    ours = tmp_path / "h3.nodeloom.json"
    assert main(["import", str(graph), "-o", str(ours), "--models-dir", str(models)]) == 0
    run = ["--run", str(ours), "--quiet", "--device", "cpu", "--models-dir", str(models)]
    assert main([*run, "--out", str(tmp_path / "out"), "--set", "save_video.format=png"]) == 0
    inputs = dict(prompt=PROMPT, num_inference_steps=3, height=32, width=48, num_frames=124)
    expected, _, _ = reference_video(folder, shifts=(6.0, 2.0), **inputs)
    default, _, _ = reference_video(folder, **inputs)
    frames = frames_in(tmp_path / "out")
    assert not np.array_equal(expected, default)  # the shifts change the video
    # Same ops in the same order on the same CPU kernels (0 measured); 1 of 255 for a rounding edge.
    assert np.abs(frames.astype(int) - expected.astype(int)).max() <= 1
