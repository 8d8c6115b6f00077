"""Single-file checkpoints, offline: tiny SD1.x and SDXL models written in the original (CompVis / SGM) key
layouts load through our loader with a local config folder and give the same image as the diffusers folder
they came from;
pickle checkpoints are refused without opt-in; families are told apart by tensor names; the shipped
config folders describe the real SD1.5 / SDXL architectures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from accelerate import init_empty_weights
from diffusers import AutoencoderKL, DiffusionPipeline, UNet2DConditionModel
from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint
from safetensors.torch import load_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.export import (
    save_sd1_single_file,
    save_sdxl_single_file,
    unet_to_original,
    vae_to_original,
)
from pipelines.diffusion.families import UnsupportedModelError, detect_single_file_family
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.single_file import CONFIG_DIRS, read_checkpoint_keys
from pipelines.diffusion.vae import decode
from pipelines.diffusion.values import Latents
from pipelines.paths import UnsafeFormatError

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir():
    """The session's data dir (tests/conftest.py), where demo models are built once and shared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield Path(os.environ["NODELOOM_DATA_DIR"])


@pytest.fixture(scope="module")
def tiny_checkpoint(data_dir: Path) -> tuple[Path, Path]:
    """(single-file checkpoint, the diffusers folder it was made from)."""
    folder = ensure_demo_model("tiny-sd")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    path = save_sd1_single_file(pipe.unet, pipe.vae, pipe.text_encoder, data_dir / "tiny-sd.safetensors")
    return path, folder


@pytest.fixture(scope="module")
def tiny_sdxl_checkpoint(data_dir: Path) -> tuple[Path, Path]:
    folder = ensure_demo_model("tiny-sdxl")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    path = save_sdxl_single_file(
        pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, data_dir / "tiny-sdxl.safetensors"
    )
    return path, folder


def image_from(spec: str, config_dir: Path | None = None) -> torch.Tensor:
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, spec, config_dir=config_dir)
    pos = encode_prompt(mm, model.text_encoder, "a red circle")
    neg = encode_prompt(mm, model.text_encoder, "")
    latents = Latents(torch.zeros(1, 4, 8, 8), 8)
    out = sample(mm, model.denoiser, pos, neg, latents, SamplerSettings("euler", steps=3, cfg=5.0, seed=11))
    return decode(mm, model.vae, out)


def test_checkpoint_has_original_key_names(tiny_checkpoint) -> None:
    keys = read_checkpoint_keys(tiny_checkpoint[0], allow_pickle=False)
    assert "model.diffusion_model.input_blocks.0.0.weight" in keys
    assert "first_stage_model.decoder.mid.attn_1.q.weight" in keys
    assert "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight" in keys
    assert not any(k.startswith(("unet.", "down_blocks.")) for k in keys)
    assert detect_single_file_family(keys) == "sd1"


def test_single_file_gives_the_folder_image(tiny_checkpoint) -> None:
    path, folder = tiny_checkpoint
    a = image_from(str(path), config_dir=folder)  # tokenizer and configs from the config folder, no network
    b = image_from(str(folder))
    assert a.shape == (1, 64, 64, 3)
    assert (a - b).abs().max().item() == 0.0


def test_sdxl_single_file_gives_the_folder_image(tiny_sdxl_checkpoint) -> None:
    path, folder = tiny_sdxl_checkpoint
    keys = read_checkpoint_keys(path, allow_pickle=False)
    assert "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight" in keys
    assert detect_single_file_family(keys) == "sdxl"
    a = image_from(str(path), config_dir=folder)
    b = image_from(str(folder))
    assert (a - b).abs().max().item() == 0.0


def test_single_file_loader_is_lazy(tiny_checkpoint) -> None:
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, str(tiny_checkpoint[0]), kind="single_file", config_dir=tiny_checkpoint[1])
    assert all(h.module is None for h in mm.ledger.handles.values())
    assert model.denoiser.family.name == "sd"


def test_pickle_checkpoint_is_refused_without_opt_in(tiny_checkpoint, tmp_path) -> None:
    ckpt = tmp_path / "model.ckpt"
    torch.save({"state_dict": {"model.diffusion_model.x": torch.zeros(1)}}, ckpt)
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    with pytest.raises(UnsafeFormatError):
        load_model(mm, str(ckpt))
    assert not mm.ledger.handles


def test_pickle_component_in_a_folder_is_refused(tiny_checkpoint, tmp_path) -> None:
    import shutil

    folder = shutil.copytree(tiny_checkpoint[1], tmp_path / "pickled")
    weights = folder / "vae" / "diffusion_pytorch_model.safetensors"
    # A real pickle (formats are decided by content: a renamed safetensors file would not be one).
    torch.save(load_file(str(weights)), folder / "vae" / "diffusion_pytorch_model.bin")
    weights.unlink()
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    with pytest.raises(UnsafeFormatError):
        load_model(mm, str(folder))


@pytest.mark.parametrize(
    ("keys", "family"),
    [
        (["model.diffusion_model.a", "cond_stage_model.transformer.text_model.b"], "sd1"),
        (["model.diffusion_model.a", "cond_stage_model.model.token_embedding.weight"], "sd2"),
        (
            [
                "model.diffusion_model.a",
                "conditioner.embedders.0.transformer.x",
                "conditioner.embedders.1.model.y",
            ],
            "sdxl",
        ),
    ],
)
def test_family_detection(keys: list[str], family: str) -> None:
    assert detect_single_file_family(keys) == family


@pytest.mark.parametrize(
    "keys",
    [
        ["double_blocks.0.img_attn.qkv.weight"],
        ["model.diffusion_model.joint_blocks.0.x"],
        ["model.diffusion_model.a", "conditioner.embedders.0.model.y"],
        ["lora_unet_down_blocks_0.alpha"],
    ],
)
def test_unsupported_checkpoints_say_what_they_are(keys: list[str]) -> None:
    with pytest.raises(UnsupportedModelError):
        detect_single_file_family(keys)


def _n(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_shipped_configs_are_the_real_architectures() -> None:
    sd15, sdxl = CONFIG_DIRS["sd1"], CONFIG_DIRS["sdxl"]
    with init_empty_weights():  # meta tensors: no memory, a few seconds
        assert (
            _n(UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(sd15 / "unet")))
            == 859_520_964
        )
        assert _n(AutoencoderKL.from_config(AutoencoderKL.load_config(sd15 / "vae"))) == 83_653_863
        assert _n(CLIPTextModel(CLIPTextConfig.from_pretrained(sd15 / "text_encoder"))) == 123_060_480
        assert (
            _n(UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(sdxl / "unet")))
            == 2_567_463_684
        )
        assert (
            _n(CLIPTextModelWithProjection(CLIPTextConfig.from_pretrained(sdxl / "text_encoder_2")))
            == 694_659_840
        )


def test_full_size_sd15_keys_round_trip_through_diffusers_converter() -> None:
    # Our export (diffusers -> original names) and diffusers' own converter (original -> diffusers) agree on
    # the full SD1.5 layout from the shipped config, checked on meta tensors.
    config_dir = CONFIG_DIRS["sd1"]
    with init_empty_weights():
        unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(config_dir / "unet"))
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(config_dir / "vae"))
    original = unet_to_original(unet.state_dict(), dict(unet.config))
    assert set(convert_ldm_unet_checkpoint(original, dict(unet.config))) == set(unet.state_dict())
    original = vae_to_original(vae.state_dict(), dict(vae.config))
    assert set(convert_ldm_vae_checkpoint(original, dict(vae.config))) == set(vae.state_dict())
