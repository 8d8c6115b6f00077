"""Real ComfyUI workflow templates (tests/data/comfy/real, see its README) import with every node mapped and
validate with `app check` (the Flux one's separate text encoders through LoadTextEncoder); with a models
folder holding files of those names, the names resolve too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from app.main import main
from nodes.comfy.mapping import PLACEHOLDER_PREFIX
from nodes.comfy.sources import import_comfy
from tests.comfy_ids import by_comfy_id

REAL = Path(__file__).resolve().parent / "data" / "comfy" / "real"
FILES = sorted(REAL.glob("*.json"))


def test_every_vendored_template_is_here() -> None:
    assert {f.name for f in FILES} == {
        "sd15_default.json",
        "sdxl_simple_example.json",
        "sd3.5_simple_example.json",
        "flux_dev_checkpoint_example.json",
    }


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_real_template_imports_with_every_node_mapped(registry, path: Path) -> None:
    result = import_comfy(path, registry)
    types = {n["type"] for n in result.workflow["nodes"].values()}
    assert not [t for t in types if t.startswith(PLACEHOLDER_PREFIX)]
    assert result.unsupported == []
    assert all(registry.get(t) is not None for t in types)
    assert {"VAEDecode", "SaveImage"} <= types


def test_sdxl_template_keeps_its_two_stage_sampling(registry) -> None:
    nodes = by_comfy_id(import_comfy(REAL / "sdxl_simple_example.json", registry).workflow)
    base, refiner = nodes["10"]["params"], nodes["11"]["params"]
    # steps and the switch step come from primitive nodes wired into converted widgets
    assert (base["steps"], base["start_step"], base["end_step"], base["leftover_noise"]) == (25, 0, 20, True)
    assert (refiner["steps"], refiner["start_step"], refiner["add_noise"], refiner["leftover_noise"]) == (
        25,
        20,
        False,
        False,
    )
    assert nodes["6"]["params"]["text"].startswith("evening sunset scenery")
    assert nodes["11"]["inputs"]["latent"] == ["10", "latent"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_real_template_passes_app_check(path: Path, capsys) -> None:
    assert main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


def test_flux_template_loads_its_split_files(registry) -> None:
    nodes = by_comfy_id(import_comfy(REAL / "flux_dev_checkpoint_example.json", registry).workflow)
    assert nodes["41:40"]["type"] == "LoadTextEncoder"
    assert nodes["41:40"]["params"]["family"] == "flux"
    assert nodes["41:38"]["type"] == "LoadDenoiser" and nodes["41:38"]["params"]["dtype"] == "auto"


def test_model_names_resolve_in_a_comfy_models_folder(tmp_path: Path, capsys) -> None:
    root = tmp_path / "models"
    for name in (
        "checkpoints/v1-5-pruned-emaonly-fp16.safetensors",
        "checkpoints/sd3.5_large_fp8_scaled.safetensors",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        save_file({"x": torch.zeros(1)}, str(root / name))
    assert main(["check", str(REAL / "sd15_default.json"), "--models-dir", str(root)]) == 0
    assert main(["check", str(REAL / "sd3.5_simple_example.json"), "--models-dir", str(root)]) == 0
    assert main(["check", str(REAL / "sdxl_simple_example.json"), "--models-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "model 'sd_xl_base_1.0.safetensors' not found; searched:" in err
