"""The files a ComfyUI user has, run: tiny demo models written in ComfyUI's layout and names (`models/
diffusion_models/`, `text_encoders/`, `vae/`), loaded by the split loader nodes (UNETLoader / CLIPLoader /
VAELoader's shape), give the picture of the same model's diffusers folder with the same seed; the fp8-scaled
file gives the picture of its weights dequantized by hand; the Q8_0 GGUF file a picture close to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, scaled_fp8_state
from pipelines.diffusion.comfy_layouts.writer import COMFY_FILES
from tests.comfy_layout_support import REPO, comfy_fixture, run_graph, split_graph

pytestmark = pytest.mark.slow  # every case builds a tiny model and runs graphs (2-10 s each)

TXT2IMG = REPO / "resources/workflows/txt2img.json"
TXT2VIDEO = REPO / "resources/workflows/txt2video.json"
BASE = {
    "sampler.scheduler": "default",
    "sampler.steps": 3,
    "sampler.cfg": 3.0,
    "sampler.seed": 42,
    "positive.text": "a small yellow triangle on a black background",
    "negative.text": "blurry bad quality",
}
# Odd sizes on purpose (nothing assumes square): 40x56 images; Wan 48x32, 5 frames, 2 steps.
IMAGE = {"latent.width": 40, "latent.height": 56}
VIDEO = {
    "latent.width": 48,
    "latent.height": 32,
    "latent.frames": 5,
    "sampler.steps": 2,
    "save.format": "png",
}
FAMILIES = ("zimage", "qwenimage", "flux2_klein", "flux2_dev", "wan")


def _workflow(family: str) -> tuple[Path, dict]:
    return (TXT2VIDEO, {**BASE, **VIDEO}) if family == "wan" else (TXT2IMG, {**BASE, **IMAGE})


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    assert len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b, strict=True))
    return max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module", params=FAMILIES)
def fixture(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    family = request.param
    folder, root = comfy_fixture(family, tmp_path_factory.mktemp(family))
    return family, folder, root / "models"


def test_comfyui_files_give_the_folder_picture(fixture: tuple[str, Path, Path], tmp_path: Path) -> None:
    family, folder, models = fixture
    workflow, sets = _workflow(family)
    theirs = run_graph(workflow, tmp_path / "folder", {**sets, "load.path": str(folder)})
    ours = run_graph(split_graph(workflow, models, family), tmp_path / "files", sets)
    assert theirs[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    diff = _max_diff(ours, theirs)
    print(f"{family}: ComfyUI files vs folder, max uint8 difference {diff}")
    # The same float32 weights, read tensor by tensor instead of whole: images come out identical here; Wan's
    # fifth frame was seen 1/255 apart (a float32 rounding edge in the video path), hence 1.
    assert diff <= 1


def _dequantized_by_hand(scaled: Path, out: Path) -> Path:
    with safe_open(str(scaled), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    save_file({k: v.contiguous() for k, v in dequantize_stubs(state).items()}, str(out))
    return out


@pytest.mark.parametrize("legacy", [False, True])
def test_fp8_scaled_file_gives_the_picture_of_its_weights_dequantized_by_hand(
    fixture: tuple[str, Path, Path], tmp_path: Path, legacy: bool
) -> None:
    family, folder, models = fixture
    if family not in ("zimage", "wan") and legacy:
        pytest.skip("the older scaled form: checked on one image and the video family")
    names = COMFY_FILES[family]
    scaled = models / "diffusion_models" / names.transformer_fp8
    if legacy:  # ComfyUI's older form (`scale_weight` + the `scaled_fp8` marker), written from the plain file
        with safe_open(str(models / "diffusion_models" / names.transformer), framework="pt") as f:
            plain = {k: f.get_tensor(k) for k in f.keys()}
        scaled = tmp_path / "legacy_fp8_scaled.safetensors"
        save_file(scaled_fp8_state(plain, legacy=True), str(scaled))
    by_hand = _dequantized_by_hand(scaled, tmp_path / "by_hand.safetensors")
    workflow, sets = _workflow(family)
    a = run_graph(split_graph(workflow, models, family, transformer=str(scaled)), tmp_path / "fp8", sets)
    b = run_graph(split_graph(workflow, models, family, transformer=str(by_hand)), tmp_path / "hand", sets)
    folder_picture = run_graph(workflow, tmp_path / "folder", {**sets, "load.path": str(folder)})
    # Same values either way (weight.float() * scale, replayed per tensor vs stored): identical pictures up to
    # a float32 rounding edge.
    assert _max_diff(a, b) <= 1
    # And fp8 is a real approximation: close to the full-precision picture, but not it.
    diff = _max_diff(a, folder_picture)
    print(f"{family} fp8 scaled vs full precision: max uint8 difference {diff}")
    assert 0 < diff <= 40  # seen 5-12 on these tiny random models; 40 catches a wrong scale (noise or black)


def test_gguf_file_stays_quantized_and_gives_a_close_picture(
    fixture: tuple[str, Path, Path], tmp_path: Path, cpu_memory: object
) -> None:
    family, folder, models = fixture
    if family not in ("qwenimage", "wan"):
        pytest.skip("GGUF: checked on one image and the video family")
    from pipelines.quant.split_files import load_denoiser_file

    path = models / "diffusion_models" / COMFY_FILES[family].transformer_gguf
    ref, message = load_denoiser_file(cpu_memory, path)
    assert "GGUF, kept quantized" in message
    with cpu_memory.use(ref.handle) as model:
        kinds = {type(m).__name__ for m in model.modules()}
    assert "GGUFLinear" in kinds  # Q8_0 layers dequantize per call, not at load
    workflow, sets = _workflow(family)
    a = run_graph(split_graph(workflow, models, family, transformer=str(path)), tmp_path / "gguf", sets)
    b = run_graph(workflow, tmp_path / "folder", {**sets, "load.path": str(folder)})
    # Q8_0 keeps 8 bits per value with a scale per 32: seen 1-2 of 255 on these models.
    assert _max_diff(a, b) <= 6


def test_stream_offload_reads_the_comfyui_files_block_by_block_with_the_same_picture(
    fixture: tuple[str, Path, Path], tmp_path: Path
) -> None:
    family, _, models = fixture
    if family not in ("zimage", "wan"):
        pytest.skip("streaming: checked on one image and the video family")
    workflow, sets = _workflow(family)
    graph = split_graph(workflow, models, family)
    plain = run_graph(graph, tmp_path / "none", sets, ("--offload", "none"))
    streamed = run_graph(graph, tmp_path / "stream", sets, ("--offload", "stream", "--ram-budget", "2GiB"))
    assert _max_diff(plain, streamed) == 0  # the same tensors, only read at other times


def test_a_size_without_a_shipped_config_is_refused_naming_the_file_and_config_dir(
    fixture: tuple[str, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    family, _, models = fixture
    if family != "zimage":
        pytest.skip("one family is enough for the message")
    import json

    from app.main import main

    path = models / "diffusion_models" / COMFY_FILES[family].transformer
    with safe_open(str(path), framework="pt") as f:  # one main layer fewer than any shipped Z-Image config
        state = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("layers.1.")}
    odd = tmp_path / "z_image_odd.safetensors"
    save_file(state, str(odd))
    workflow = tmp_path / "odd.json"
    workflow.write_text(
        json.dumps(split_graph(TXT2IMG, models, family, transformer=str(odd))), encoding="utf-8"
    )
    capsys.readouterr()
    code = main(["--run", str(workflow), "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"])
    err = capsys.readouterr().err
    # Read when the node runs: a loader's refusal is "run failed" (exit 1), one line naming the node and field.
    assert code == 1
    assert "node 'unet' (LoadDenoiser) failed: field 'path'" in err
    assert "z_image_odd.safetensors" in err and "config_dir" in err and "Traceback" not in err
