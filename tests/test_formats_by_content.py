"""Formats decided by content everywhere: `app models list`, a safetensors header length past the file, LoRAs.

A file's name proves nothing (pipelines/weight_format.py): the models list must show what the loaders will
find, a merely damaged safetensors file must be called that (not "treated as a pickle"), and the LoRA loader
must refuse a pickle the way every other loader does, loading it only with the explicit opt-in.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from app.main import main
from pipelines.diffusion.lora_formats import read_lora
from pipelines.models_library import ModelsLibrary
from pipelines.paths import resolve_model_path
from pipelines.weight_format import DamagedWeightsError, UnsafeFormatError, check_weights_format

REPO = Path(__file__).resolve().parent.parent
TXT2IMG_LORA = REPO / "resources/workflows/txt2img_lora.json"
PEFT_LORA = {
    "unet.down_blocks.0.attentions.0.proj_in.lora_A.weight": torch.ones(4, 32),
    "unet.down_blocks.0.attentions.0.proj_in.lora_B.weight": torch.ones(32, 4),
}


def _huge_header(path: Path) -> Path:
    save_file({"w": torch.zeros(2)}, str(path))
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", 2**62)  # the JSON header still follows: a damaged safetensors file
    path.write_bytes(bytes(data))
    return path


def test_models_list_shows_the_format_by_content(tmp_path: Path, capsys) -> None:
    root = tmp_path / "models"
    root.mkdir()
    torch.save({"w": torch.zeros(2)}, root / "zip.safetensors")
    save_file({"w": torch.zeros(2)}, str(root / "real.pt"))
    _huge_header(root / "cut.safetensors")
    formats = {e.name: e.format for e in ModelsLibrary([root]).entries()}
    assert formats == {"zip.safetensors": "torch-zip", "real.pt": "safetensors", "cut.safetensors": "damaged"}
    assert main(["models", "list", "--models-dir", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {name: next(line for line in lines if name in line) for name in formats}
    assert "torch-zip" in rows["zip.safetensors"] and "damaged" in rows["cut.safetensors"]


def test_a_header_length_past_the_file_is_a_damaged_safetensors_file_not_a_pickle(tmp_path: Path) -> None:
    path = _huge_header(tmp_path / "model.safetensors")
    for allow_pickle in (False, True):  # with the opt-in it must not reach a pickle loader either
        with pytest.raises(DamagedWeightsError) as caught:
            check_weights_format(path, allow_pickle=allow_pickle)
        message = str(caught.value)
        assert message.startswith("model.safetensors: a damaged safetensors file")
        assert "larger than the file" in message
        assert "pickle" not in message and "--allow-pickle" not in message


def test_a_lora_that_is_a_pickle_is_refused_like_every_other_pickle(tmp_path: Path) -> None:
    save_file(PEFT_LORA, str(tmp_path / "lora.safetensors"))
    torch.save(PEFT_LORA, tmp_path / "pickled.safetensors")
    with pytest.raises(UnsafeFormatError, match=r"pickled\.safetensors: .*--allow-pickle"):
        read_lora(tmp_path / "pickled.safetensors", "sd")
    opted_in = read_lora(tmp_path / "pickled.safetensors", "sd", allow_pickle=True)
    expected = read_lora(tmp_path / "lora.safetensors", "sd")
    assert opted_in.layout == expected.layout and set(opted_in.targets) == set(expected.targets)
    layer = "down_blocks.0.attentions.0.proj_in"
    assert torch.equal(
        opted_in.targets["denoiser"][layer].delta(torch.Size([32, 32])),
        expected.targets["denoiser"][layer].delta(torch.Size([32, 32])),
    )


def test_a_pickled_lora_through_the_cli_exits_1_and_runs_with_the_opt_in(tmp_path: Path, capsys) -> None:
    real = resolve_model_path("builtin:shapes-sd-loras/outline.safetensors")
    pickled = tmp_path / "outline.safetensors"
    torch.save(load_file(str(real)), pickled)
    argv = ["--run", str(TXT2IMG_LORA), "--set", f"lora.path={pickled}", "--set", "sampler.steps=1"]
    argv += ["--out", str(tmp_path / "out"), "--quiet", "--threads", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "outline.safetensors" in err and "--allow-pickle" in err
    assert "SafetensorError" not in err and "Traceback" not in err
    assert main([*argv, "--allow-pickle"]) == 0
    assert list((tmp_path / "out").glob("*.png"))
