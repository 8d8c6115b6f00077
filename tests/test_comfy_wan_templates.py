"""ComfyUI's published Wan templates (the `comfyui-workflow-templates-json` package): the ones whose models run
here import with every node mapped and pass `app check` but for their missing model files; the Wan variants
that are other models (Animate, SCAIL, Alpha) are refused as families naming the node; and the Wan 2.2 A14B
templates (two UNETLoaders, two KSamplerAdvanced segments: image, first-last frame and text to video) run on
tiny fixtures written under the templates'
own file names, giving the frames of the same demo folder's native two-expert graph with the same settings,
the two experts never resident together under `--offload sequential`; and Wan 2.1's text-to-video template
(KSampler uni_pc) and image-to-video one (a CLIP vision file) give the native graph's frames with the same
sampler.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.main import main
from nodes.comfy.sources import import_comfy
from tests.comfy_layout_support import REPO, run_graph
from tests.wan_template_support import template_path, wan_template_root

pytest.importorskip("comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json")

RUNNABLE = (
    "video_wan2_2_14B_i2v",
    "image_to_video_wan",
    "wan2.1_flf2v_720_f16",
    "video_wan2_2_14B_t2v",
    "video_wan2_2_14B_flf2v",
    "video_wan2_2_5B_ti2v",
    "text_to_video_wan",
)
# Template -> the node (or file) the check must name as a model family Nodeloom does not run.
VARIANTS = {
    "video_wan_animate2": ("wan_animate", "WanAnimate2ToVideo"),
    "video_wan21_scail2_character_replacement": ("wan_scail", "WanSCAILToVideo"),
    "video_wan2.1_alpha_t2v_14B": ("wan_alpha", "wan_alpha_2.1_"),
}
START = REPO / "resources/images/shapes_sample.png"
STEPS, SHIFT = 4, 5.000000000000001  # the templates' ModelSamplingSD3 shift (5, as ComfyUI stores it)


def _check_json(path: Path, models: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    capsys.readouterr()
    main(["check", "--json", "--models-dir", str(models), str(path)])
    return json.loads(capsys.readouterr().out)[0]["problems"]


@pytest.mark.parametrize("name", RUNNABLE)
def test_wan_template_imports_and_checks_clean_but_for_its_model_files(
    name: str, registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = import_comfy(template_path(name), registry)
    assert result.unsupported == [] and result.families == [], name
    (tmp_path / "models").mkdir()
    problems = _check_json(template_path(name), tmp_path, capsys)
    assert {p["kind"] for p in problems} == {"missing-model"}, problems
    # Every model file the run needs is named, the ones a subgraph's promoted widgets keep on inner nodes too.
    loaders = ("LoadDenoiser", "LoadTextEncoder", "LoadVAE", "LoadCLIPVision")
    files = {n["params"]["path"] for n in result.workflow["nodes"].values() if n["type"] in loaders}
    assert files and all(isinstance(f, str) and f.endswith(".safetensors") for f in files), files
    assert all(any(f in p["message"] for p in problems) for f in files), (files, problems)


def test_the_i2v_templates_length_is_its_duration_times_fps_plus_one(registry) -> None:
    """The template's length: ComfyMathExpression `floor (a * b + 1)` over two primitives (5 s, 16 fps). Every
    value a constant, so the import resolves it (nodes/comfy/mapping_values.py) and the latent takes 81."""
    nodes = import_comfy(template_path("video_wan2_2_14B_i2v"), registry).workflow["nodes"]
    wan = nodes["wan_image_to_video"]
    assert "length" not in wan["inputs"] and wan["params"]["length"] == 81
    assert not any(node["type"] == "MathExpression" for node in nodes.values())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_wan_variants_are_refused_as_families_naming_the_node(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    family, named = VARIANTS[name]
    (tmp_path / "models").mkdir()
    problems = [
        p for p in _check_json(template_path(name), tmp_path, capsys) if p["kind"] == "unsupported-family"
    ]
    assert [p for p in problems if f"model family {family!r}" in p["message"] and named in p["message"]], (
        problems
    )


def _split_step(folder: Path, shift: float = SHIFT) -> int:
    """Where the folder's own two-expert run switches experts at these settings (t >= boundary x 1000 on the
    high-noise expert): the step the template's two segments are set to meet at."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from nodes.comfy.sampling_nodes import sampling_config

    config = json.loads((folder / "scheduler/scheduler_config.json").read_text())
    config = sampling_config(config, "sd3", shift=shift)
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config, shift=config["flow_shift"])
    scheduler.set_timesteps(STEPS)
    boundary = json.loads((folder / "model_index.json").read_text())["boundary_ratio"] * 1000
    split = sum(1 for t in scheduler.timesteps if t >= boundary)
    assert 0 < split < STEPS  # both experts run
    return split


def _template_sets(
    split: int, latent: str, high: str = "ksampler_advanced_2", low: str = "ksampler_advanced"
) -> dict:
    """The template at a tiny size and few steps: 48x32, 5 frames (the length its math node gives is resolved
    at import into the latent's field), STEPS steps, the high-noise segment [0, split) and the low-noise one
    [split, STEPS), seed 42, PNG frames."""
    length = "frames" if latent.startswith("empty") else "length"  # our Empty Video Latent calls it frames
    return {
        f"{latent}.width": 48,
        f"{latent}.height": 32,
        f"{latent}.{length}": 5,
        f"{high}.steps": STEPS,
        f"{high}.end_step": split,
        f"{high}.seed": 42,
        f"{low}.steps": STEPS,
        f"{low}.start_step": split,
        f"{low}.end_step": STEPS,
        "save_video.format": "png",
    }


def _native(workflow: Path) -> dict:
    """Our own workflow with the template's ModelSamplingSD3 shift (Model Sampling Shift) before the sampler
    and the template's prompts."""
    spec = json.loads(workflow.read_text())
    nodes = spec["nodes"]
    nodes["shift"] = {
        "type": "ModelSamplingShift",
        "params": {"mode": "sd3", "shift": SHIFT},
        "inputs": {"denoiser": ["load", "denoiser"]},
    }
    nodes["sampler"]["inputs"]["denoiser"] = ["shift", "denoiser"]
    return spec


def _prompts(template: str, registry) -> dict:
    """The template's prompts: the texts of the encoders its (first) sampler's positive and negative come from
    (through Wan Image To Video's pass-through)."""
    nodes = import_comfy(template_path(template), registry).workflow["nodes"]
    sampler = next(n for n in nodes.values() if n["type"] in ("Sampler", "SamplerAdvanced"))
    texts = {}
    for port in ("positive", "negative"):
        source = nodes[sampler["inputs"][port][0]]
        if source["type"] != "TextEncode":
            source = nodes[source["inputs"][port][0]]
        texts[f"{port}.text"] = source["params"]["text"]
    return texts


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    assert len(a) == len(b) == 5 and all(x.shape == y.shape == (32, 48, 3) for x, y in zip(a, b, strict=True))
    return max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b, strict=True))


def _experts_one_at_a_time(report: Path) -> None:
    """Both expert files loaded, each unloaded before the next loads (the report's memory events, in time)."""
    memory = json.loads(report.read_text())["memory"]
    denoisers = {e["component"] for e in memory["loads"] if e["kind"] == "denoiser"}
    events = sorted(
        [(e["t"], "load") for e in memory["loads"] if e["component"] in denoisers]
        + [(e["t"], "unload") for e in memory["unloads"] if e["component"] in denoisers]
    )
    assert [kind for _, kind in events] == ["load", "unload", "load", "unload"], events


@pytest.fixture(scope="module")
def i2v_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("wan22-i2v-template")
    folder = copy_demo_model("tiny-wan22-i2v", tmp / "tiny-wan22-i2v")
    return folder, wan_template_root(folder, "video_wan2_2_14B_i2v", tmp / "ComfyUI", START)


@pytest.mark.slow  # builds a tiny two-expert folder, writes its ComfyUI files, runs two graphs (~1 min)
def test_wan22_i2v_template_gives_the_native_two_expert_frames_one_expert_at_a_time(
    i2v_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    folder, root = i2v_root
    template = "video_wan2_2_14B_i2v"
    split = _split_step(folder)
    report = tmp_path / "report.json"
    extra = ("--models-dir", str(root), "--offload", "sequential", "--report", str(report))
    theirs = run_graph(
        template_path(template), tmp_path / "template", _template_sets(split, "wan_image_to_video"), extra
    )
    _experts_one_at_a_time(report)
    sets = {
        "load.path": str(folder),
        "image.path": str(root / "input/video_wan2_2_14B_i2v_input_image.jpg"),  # the template's picture
        "i2v.width": 48,
        "i2v.height": 32,
        "i2v.length": 5,
        "sampler.scheduler": "euler",  # ComfyUI's euler on a flow model
        "sampler.steps": STEPS,
        "sampler.cfg": 3.5,  # the template's
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(_native(REPO / "resources/workflows/img2video.json"), tmp_path / "native", sets)
    assert theirs[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's names instead of the folder's: seen 1/255 apart at most
    # (a float32 rounding edge in the video path, as in test_comfy_layouts_runs).
    assert _max_diff(theirs, ours) <= 1


@pytest.fixture(scope="module")
def t2v_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("wan22-t2v-template")
    folder = copy_demo_model("tiny-wan22", tmp / "tiny-wan22")
    return folder, wan_template_root(folder, "video_wan2_2_14B_t2v", tmp / "ComfyUI")


@pytest.mark.slow  # as the image-to-video case
def test_wan22_t2v_template_gives_the_native_two_expert_frames(
    t2v_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    folder, root = t2v_root
    template = "video_wan2_2_14B_t2v"
    split = _split_step(folder)
    extra = ("--models-dir", str(root), "--offload", "sequential")
    sets = _template_sets(split, "empty_hunyuan_latent_video")
    theirs = run_graph(template_path(template), tmp_path / "template", sets, extra)
    sets = {
        "load.path": str(folder),
        "latent.width": 48,
        "latent.height": 32,
        "latent.frames": 5,
        "sampler.scheduler": "euler",
        "sampler.steps": STEPS,
        "sampler.cfg": 3.5,
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(_native(REPO / "resources/workflows/txt2video.json"), tmp_path / "native", sets)
    assert theirs[0].std() > 5
    assert _max_diff(theirs, ours) <= 1  # as the image-to-video case


@pytest.fixture(scope="module")
def t2v21_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("wan21-t2v-template")
    folder = copy_demo_model("tiny-wan", tmp / "tiny-wan")
    return folder, wan_template_root(folder, "text_to_video_wan", tmp / "ComfyUI")


@pytest.mark.slow  # as the image-to-video case, one expert
def test_wan21_t2v_template_runs_comfyuis_uni_pc_as_the_native_graph(
    t2v21_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    """text_to_video_wan: KSampler uni_pc / simple at ModelSamplingSD3 shift 8, cfg 6 (the template's)."""
    folder, root = t2v21_root
    template = "text_to_video_wan"
    sets = {
        "empty_hunyuan_latent_video.width": 48,
        "empty_hunyuan_latent_video.height": 32,
        "empty_hunyuan_latent_video.frames": 5,
        "ksampler.steps": STEPS,
        "ksampler.seed": 42,
        "save_video.format": "png",
    }
    theirs = run_graph(template_path(template), tmp_path / "template", sets, ("--models-dir", str(root)))
    native = _native(REPO / "resources/workflows/txt2video.json")
    native["nodes"]["shift"]["params"]["shift"] = 8
    sets = {
        "load.path": str(folder),
        "latent.width": 48,
        "latent.height": 32,
        "latent.frames": 5,
        "sampler.scheduler": "k_uni_pc",
        "sampler.sigma_schedule": "simple",
        "sampler.steps": STEPS,
        "sampler.cfg": 6,
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(native, tmp_path / "native", sets)
    assert theirs[0].std() > 5
    assert _max_diff(theirs, ours) <= 1  # as the image-to-video case


@pytest.fixture(scope="module")
def i2v21_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("wan21-i2v-template")
    folder = copy_demo_model("tiny-wan-i2v", tmp / "tiny-wan-i2v")
    return folder, wan_template_root(folder, "image_to_video_wan", tmp / "ComfyUI", START)


@pytest.mark.slow  # as the image-to-video case, one expert
def test_wan21_i2v_template_with_a_clip_vision_file_gives_the_native_frames(
    i2v21_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    """image_to_video_wan: the CLIP vision file (models/clip_vision/) through CLIP Vision Encode gives the
    states the folder's own image encoder gives; uni_pc / simple at shift 8, cfg 6 (the template's)."""
    folder, root = i2v21_root
    template = "image_to_video_wan"
    sets = {
        "wan_image_to_video.width": 48,
        "wan_image_to_video.height": 32,
        "wan_image_to_video.length": 5,
        "ksampler.steps": STEPS,
        "ksampler.seed": 42,
        "save_video.format": "png",
    }
    theirs = run_graph(template_path(template), tmp_path / "template", sets, ("--models-dir", str(root)))
    native = _native(REPO / "resources/workflows/img2video.json")
    native["nodes"]["shift"]["params"]["shift"] = 8
    sets = {
        "load.path": str(folder),
        "image.path": str(root / "input/image_to_video_wan_start_image.png"),
        "i2v.width": 48,
        "i2v.height": 32,
        "i2v.length": 5,
        "sampler.scheduler": "k_uni_pc",
        "sampler.sigma_schedule": "simple",
        "sampler.steps": STEPS,
        "sampler.cfg": 6,
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(native, tmp_path / "native", sets)
    assert theirs[0].std() > 5
    assert _max_diff(theirs, ours) <= 1  # as the image-to-video case


@pytest.mark.slow  # as the image-to-video case, on its fixture
def test_wan22_flf2v_template_gives_the_native_first_last_frame_frames(
    i2v_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    """video_wan2_2_14B_flf2v on the same two expert files (its names are the I2V template's): a first and a
    last frame, shift 8, cfg 4; its length is a constant on the node, its high-noise sampler the first."""
    import shutil

    from PIL import Image

    folder, root = i2v_root
    template = "video_wan2_2_14B_flf2v"
    start, end = (
        root / "input/video_wan2_2_14B_flf2v_start_image.png",
        root / "input/video_wan2_2_14B_flf2v_end_image.png",
    )
    shutil.copy(root / "input/video_wan2_2_14B_i2v_input_image.jpg", tmp_path / "start.jpg")
    Image.open(tmp_path / "start.jpg").save(start)
    Image.open(tmp_path / "start.jpg").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(end)  # the ends differ
    split = _split_step(folder, shift=8.000000000000002)
    sets = _template_sets(
        split, "wan_first_last_frame_to_video", high="ksampler_advanced", low="ksampler_advanced_2"
    )
    theirs = run_graph(template_path(template), tmp_path / "template", sets, ("--models-dir", str(root)))
    native = _native(REPO / "resources/workflows/img2video.json")
    native["nodes"]["shift"]["params"]["shift"] = 8.000000000000002
    native["nodes"]["end"] = {"type": "LoadImage", "params": {"path": str(end)}, "inputs": {}}
    native["nodes"]["i2v"]["type"] = "WanFirstLastFrameToVideo"
    native["nodes"]["i2v"]["inputs"]["end_image"] = ["end", "image"]
    sets = {
        "load.path": str(folder),
        "image.path": str(start),
        "i2v.width": 48,
        "i2v.height": 32,
        "i2v.length": 5,
        "sampler.scheduler": "euler",
        "sampler.steps": STEPS,
        "sampler.cfg": 4,
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(native, tmp_path / "native", sets)
    assert theirs[0].std() > 5
    assert _max_diff(theirs, ours) <= 1  # as the image-to-video case


@pytest.fixture(scope="module")
def flf2v21_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("wan21-flf2v-template")
    folder = copy_demo_model("tiny-wan-flf2v", tmp / "tiny-wan-flf2v")
    return folder, wan_template_root(folder, "wan2.1_flf2v_720_f16", tmp / "ComfyUI", START)


@pytest.mark.slow  # as the image-to-video case, one expert
def test_wan21_flf2v_template_reads_its_frame_positions_and_gives_the_native_frames(
    flf2v21_root: tuple[Path, Path], registry, tmp_path: Path
) -> None:
    """wan2.1_flf2v_720_f16: Wan 2.1 FLF2V's transformer file carries the two frames' CLIP positions
    (`img_emb.emb_pos`, which diffusers' single-file converter leaves unnamed), so it loads as the FLF2V size;
    both pictures go through CLIP Vision Encode; uni_pc / simple at shift 8, cfg 3 (the template's)."""
    from PIL import Image

    folder, root = flf2v21_root
    template = "wan2.1_flf2v_720_f16"
    start = root / "input/wan2.1_flf2v_720_f16_start_image.png"
    end = root / "input/wan2.1_flf2v_720_f16_end_image.png"
    Image.open(start).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(end)  # the ends differ
    sets = {
        "wan_first_last_frame_to_video.width": 48,
        "wan_first_last_frame_to_video.height": 32,
        "wan_first_last_frame_to_video.length": 5,
        "ksampler.steps": STEPS,
        "ksampler.seed": 42,
        "save_video.format": "png",
    }
    theirs = run_graph(template_path(template), tmp_path / "template", sets, ("--models-dir", str(root)))
    native = _native(REPO / "resources/workflows/img2video.json")
    native["nodes"]["shift"]["params"]["shift"] = 8
    native["nodes"]["end"] = {"type": "LoadImage", "params": {"path": str(end)}, "inputs": {}}
    native["nodes"]["i2v"]["type"] = "WanFirstLastFrameToVideo"
    native["nodes"]["i2v"]["inputs"]["end_image"] = ["end", "image"]
    sets = {
        "load.path": str(folder),
        "image.path": str(start),
        "i2v.width": 48,
        "i2v.height": 32,
        "i2v.length": 5,
        "sampler.scheduler": "k_uni_pc",
        "sampler.sigma_schedule": "simple",
        "sampler.steps": STEPS,
        "sampler.cfg": 3,
        "sampler.seed": 42,
        "save.format": "png",
        **_prompts(template, registry),
    }
    ours = run_graph(native, tmp_path / "native", sets)
    assert theirs[0].std() > 5
    assert _max_diff(theirs, ours) <= 1  # as the image-to-video case
