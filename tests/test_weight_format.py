"""Weight formats are decided by content: a pickle under any name never runs without --allow-pickle."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.main import main
from memory import MemoryConfig, MemoryManager
from nodes.png import save_png_with_workflow
from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.loading import load_component_file, load_model
from pipelines.diffusion.single_file import CONFIG_DIRS
from pipelines.llm.hf_loader import prepare_llm_files
from pipelines.paths import UnsafeFormatError
from pipelines.weight_format import (
    DamagedWeightsError,
    WeightFormat,
    check_weights_format,
    load_pickle_state_dict,
    sniff_weight_format,
)

DISGUISES = (
    "model.SAFETENSORS",
    "model.Safetensors",
    "model.gguf",
    "model.model",
    "model.th",
    "model.pickle",
    "model.safetensors.bak",
    "model",
)


class Payload:
    """Unpickling this writes `marker`: the proof that a load ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def _evil(path: Path, marker: Path, *, zipped: bool) -> Path:
    data = {"state_dict": {"model.diffusion_model.x": torch.zeros(1)}, "evil": Payload(marker)}
    if zipped:
        torch.save(data, path)  # a torch zip archive with the pickle inside
    else:
        with path.open("wb") as f:
            pickle.dump(data, f, protocol=4)
    return path


@pytest.fixture
def mm():
    manager = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    yield manager
    manager.close()


@pytest.mark.parametrize("zipped", [True, False], ids=["torch-zip", "raw-pickle"])
@pytest.mark.parametrize("name", DISGUISES)
def test_a_disguised_pickle_never_runs_through_the_checkpoint_loader(tmp_path, mm, name, zipped) -> None:
    marker = tmp_path / "marker"
    path = _evil(tmp_path / name, marker, zipped=zipped)
    with pytest.raises(UnsafeFormatError, match="pickle") as caught:
        load_model(mm, str(path), kind="single_file")
    assert not marker.exists()
    assert path.name in str(caught.value) and "--allow-pickle" in str(caught.value)
    assert not mm.ledger.handles


@pytest.mark.parametrize("name", DISGUISES)
def test_a_disguised_pickle_never_runs_through_the_component_and_llm_loaders(tmp_path, mm, name) -> None:
    marker = tmp_path / "marker"
    path = _evil(tmp_path / name, marker, zipped=True)
    with pytest.raises(UnsafeFormatError):
        load_component_file(mm, path, component="vae", config_dir=CONFIG_DIRS["sd1"], family=FAMILIES["sd"])
    with pytest.raises(UnsafeFormatError):
        prepare_llm_files(path)
    assert not marker.exists()


def test_a_pickle_named_safetensors_inside_a_model_folder_is_refused(tmp_path, mm) -> None:
    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    marker = tmp_path / "marker"
    _evil(folder / "model.safetensors", marker, zipped=True)
    with pytest.raises(UnsafeFormatError, match="model.safetensors"):
        prepare_llm_files(folder)
    assert not marker.exists()


def test_app_run_of_a_png_naming_a_disguised_pickle_runs_nothing(tmp_path, capsys) -> None:
    marker = tmp_path / "marker"
    evil = _evil(tmp_path / "evil.SAFETENSORS", marker, zipped=True)
    workflow = json.loads(Path("resources/workflows/txt2img.json").read_text())
    workflow["nodes"]["load"]["params"]["path"] = str(evil)
    png = tmp_path / "evil.png"
    save_png_with_workflow(Image.new("RGB", (8, 8)), png, workflow)
    code = main(["--run", str(png), "--out", str(tmp_path / "out"), "--quiet"])
    assert code != 0
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "evil.SAFETENSORS" in err and "pickle" in err


def test_real_formats_are_recognised_whatever_their_name(tmp_path) -> None:
    tensors = tmp_path / "weights.ckpt"  # a safetensors file with a pickle's name is still safe
    save_file({"a": torch.zeros(2)}, str(tensors))
    assert check_weights_format(tensors, allow_pickle=False) == WeightFormat.SAFETENSORS
    gguf = tmp_path / "model.bin"
    gguf.write_bytes(b"GGUF" + b"\0" * 20)
    assert sniff_weight_format(gguf) == WeightFormat.GGUF


def test_damaged_safetensors_and_empty_files_say_so_and_name_the_file(tmp_path) -> None:
    good = tmp_path / "good.safetensors"
    save_file({"a": torch.zeros(1000)}, str(good))
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:200])
    with pytest.raises(DamagedWeightsError, match=r"cut\.safetensors.*damaged"):
        sniff_weight_format(cut)
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(DamagedWeightsError, match=r"empty\.safetensors.*empty"):
        sniff_weight_format(empty)


def test_with_opt_in_a_plain_checkpoint_loads_with_weights_only(tmp_path) -> None:
    path = tmp_path / "plain.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the weights_only=True load succeeds: no fallback warning
        state = load_pickle_state_dict(path, allow_pickle=True)
    assert torch.equal(state["w"], torch.ones(3))
    with pytest.raises(UnsafeFormatError):
        load_pickle_state_dict(path, allow_pickle=False)


def test_a_truncated_gguf_says_it_is_damaged_and_how_much_is_missing(tmp_path) -> None:
    from gguf import GGMLQuantizationType

    from pipelines.llm.gguf_loader import read_gguf
    from tests.llm_fixtures import tiny_llama, write_tiny_gguf

    full = tmp_path / "full.gguf"
    write_tiny_gguf(tiny_llama(), full, GGMLQuantizationType.F32)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[:-1000])
    with pytest.raises(DamagedWeightsError, match=r"cut\.gguf.*damaged or incomplete.*1,000 bytes missing"):
        read_gguf(cut)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(full.read_bytes()[:40])
    with pytest.raises(DamagedWeightsError, match=r"header\.gguf"):
        read_gguf(header_only)
