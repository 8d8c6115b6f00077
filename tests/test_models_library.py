"""The models library: ComfyUI-style and flat roots, names relative to a root, family detection from the
header, `app models list`, and an SD1.5-architecture ComfyUI workflow that runs against a single-file
checkpoint found by name under --models-dir.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from diffusers import DiffusionPipeline
from safetensors.torch import save_file

from app.main import main
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.export import save_sd1_single_file
from pipelines.models_library import ModelsLibrary, detect_family, load_saved_roots
from pipelines.paths import ModelNotFoundError, resolve_model_path

DATA = Path(__file__).resolve().parent / "data" / "comfy"


def _header_only(path: Path, keys: dict[str, tuple[int, ...]]) -> Path:
    """A small safetensors file whose tensor names (and shapes) look like a real model's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(shape) for k, shape in keys.items()}, str(path))
    return path


@pytest.fixture
def comfy_root(tmp_path: Path) -> Path:
    root = tmp_path / "ComfyUI" / "models"
    _header_only(
        root / "checkpoints" / "sdxl" / "base.safetensors",
        {"model.diffusion_model.input_blocks.0.0.weight": (2, 2), "conditioner.embedders.1.model.x": (1,)},
    )
    _header_only(root / "unet" / "flux1-dev.safetensors", {"double_blocks.0.img_attn.qkv.weight": (2, 2)})
    _header_only(root / "vae" / "ae.safetensors", {"decoder.conv_in.weight": (8, 16, 3, 3)})
    _header_only(root / "loras" / "detail.safetensors", {"lora_unet_down_blocks_0.lora_down.weight": (2, 2)})
    (root / "embeddings").mkdir()
    return tmp_path / "ComfyUI"  # the install folder: its models/ is found


def test_comfy_root_is_recognised_and_names_resolve_per_kind(comfy_root: Path, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    _header_only(flat / "sd15" / "tiny.safetensors", {"cond_stage_model.transformer.x": (1,)})
    library = ModelsLibrary([comfy_root, flat])
    models = comfy_root / "models"
    assert library.roots == (models, flat)
    assert library.is_comfy_root(models) and not library.is_comfy_root(flat)
    # `unet` is ComfyUI's legacy name for diffusion_models; kinds narrow the search.
    assert (
        library.find("flux1-dev.safetensors", ["diffusion_models"])
        == models / "unet" / "flux1-dev.safetensors"
    )
    assert library.find("flux1-dev.safetensors", ["vae"]) is None
    assert library.find("sd15/tiny.safetensors") == flat / "sd15" / "tiny.safetensors"
    assert library.find("../flat/sd15/tiny.safetensors") is None  # never outside a root
    assert resolve_model_path("sdxl/base.safetensors", library, ["checkpoints"]) == (
        models / "checkpoints" / "sdxl" / "base.safetensors"
    )
    with pytest.raises(ModelNotFoundError) as missing:
        resolve_model_path("nope.safetensors", library, ["checkpoints"])
    assert str(models / "checkpoints") in str(missing.value) and str(flat) in str(missing.value)


def test_listing_reads_headers_for_family_and_format(comfy_root: Path) -> None:
    entries = {e.name: e for e in ModelsLibrary([comfy_root]).entries()}
    assert {n: (e.kind, e.family, e.format) for n, e in entries.items()} == {
        "sdxl/base.safetensors": ("checkpoints", "sdxl", "safetensors"),
        "flux1-dev.safetensors": ("diffusion_models", "flux", "safetensors"),
        "ae.safetensors": ("vae", "sd3", "safetensors"),  # 16 latent channels: SD3/Flux VAE
        "detail.safetensors": ("loras", "lora", "safetensors"),
    }
    assert all(e.size == e.path.stat().st_size for e in entries.values())


def test_models_list_command_prints_the_table(comfy_root: Path, capsys) -> None:
    assert main(["models", "list", "--models-dir", str(comfy_root)]) == 0
    out = capsys.readouterr().out
    assert "sdxl/base.safetensors" in out and "diffusion_models" in out and "flux" in out


def test_saved_roots_are_a_setting(comfy_root: Path, capsys) -> None:
    assert main(["models", "add-root", str(comfy_root)]) == 0
    try:
        assert comfy_root.resolve() in load_saved_roots()
        assert main(["models", "roots"]) == 0
        assert "ComfyUI-style" in capsys.readouterr().out
    finally:
        assert main(["models", "remove-root", str(comfy_root)]) == 0
    assert comfy_root.resolve() not in load_saved_roots()


def test_detect_family_of_a_diffusers_folder() -> None:
    assert detect_family(ensure_demo_model("tiny-sd")) == "sd"


@pytest.fixture(scope="module")
def sd15_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ComfyUI models folder with a tiny SD1.5-architecture single-file checkpoint at sd15/tiny.safetensors."""
    root = tmp_path_factory.mktemp("models")
    pipe = DiffusionPipeline.from_pretrained(str(ensure_demo_model("tiny-sd")))
    (root / "checkpoints" / "sd15").mkdir(parents=True)
    save_sd1_single_file(
        pipe.unet, pipe.vae, pipe.text_encoder, root / "checkpoints" / "sd15" / "tiny.safetensors"
    )
    return root


def _sd15_api(tmp_path: Path, ckpt_name: str) -> Path:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["4"]["inputs"]["ckpt_name"] = ckpt_name
    prompt["5"]["inputs"].update(width=64, height=64)
    prompt["3"]["inputs"]["steps"] = 3
    path = tmp_path / "sd15_api.json"
    path.write_text(json.dumps(prompt))
    return path


def test_comfy_sd15_workflow_runs_against_a_checkpoint_found_by_name(sd15_root: Path, tmp_path: Path) -> None:
    workflow = _sd15_api(tmp_path, "sd15/tiny.safetensors")
    assert main(["check", str(workflow), "--models-dir", str(sd15_root)]) == 0
    out = tmp_path / "out"
    # A real SD1.5 file uses the shipped SD1.5 config; the tiny test model needs its own.
    config = f"load_checkpoint.config_dir={ensure_demo_model('tiny-sd')}"
    run = [
        "--run",
        str(workflow),
        "--models-dir",
        str(sd15_root),
        "--set",
        config,
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(run) == 0
    images = sorted(out.glob("SD1.5_*.png"))
    assert len(images) == 1


def test_a_missing_model_name_is_a_validation_error_naming_the_folders(
    sd15_root: Path, tmp_path: Path, capsys
) -> None:
    workflow = _sd15_api(tmp_path, "sd15/missing.safetensors")
    assert main(["check", str(workflow), "--models-dir", str(sd15_root)]) == 2
    err = capsys.readouterr().err
    assert (
        "node 'load_checkpoint', field 'path': model 'sd15/missing.safetensors' not found; searched:" in err
    )
    assert os.fspath(sd15_root / "checkpoints") in err
    assert main(["--run", str(workflow), "--models-dir", str(sd15_root), "--out", str(tmp_path / "o")]) == 2


def test_a_missing_full_path_says_the_file_does_not_exist(sd15_root: Path, tmp_path: Path, capsys) -> None:
    # The library folders matter for names, not for a full path the user typed: here into the imported
    # workflow (a full path in the ComfyUI file itself is refused: tests/test_imported_names.py).
    missing = tmp_path / "downloads" / "model.safetensors"
    workflow = tmp_path / "mine.json"
    assert main(["import", str(_sd15_api(tmp_path, "sd15/tiny.safetensors")), "-o", str(workflow)]) == 0
    data = json.loads(workflow.read_text())
    data["nodes"]["load_checkpoint"]["params"]["path"] = str(missing)
    workflow.write_text(json.dumps(data))
    assert main(["check", str(workflow), "--models-dir", str(sd15_root)]) == 2
    err = capsys.readouterr().err
    assert f"node 'load_checkpoint', field 'path': file does not exist: {missing} ({tmp_path} exists" in err
    assert "searched" not in err
