"""ComfyUI's FLUX.1 and SD3.5 all-in-one checkpoints (CheckpointLoaderSimple's `flux1-schnell-fp8`,
`sd3.5_large_fp8_scaled`): our writers' transformer layouts are exactly what diffusers' own converters read,
at the released sizes too (diffusers' model-type guess names them); the family is told from the tensor names;
a tiny checkpoint written from a demo folder loads lazily and gives that folder's picture.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from accelerate import init_empty_weights
from diffusers import DiffusionPipeline, FluxTransformer2DModel, SD3Transformer2DModel
from diffusers.loaders.single_file_utils import (
    convert_flux_transformer_checkpoint_to_diffusers,
    convert_sd3_transformer_checkpoint_to_diffusers,
    infer_diffusers_model_type,
)

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.demo_models import TINY_SD3, ensure_demo_model
from pipelines.diffusion.export_flow import (
    DENOISER_PREFIX,
    save_flux_single_file,
    save_sd3_single_file,
    sd3_transformer_to_original,
)
from pipelines.diffusion.families import UnsupportedModelError, detect_single_file_family
from pipelines.diffusion.single_file import CONFIG_DIRS
from pipelines.diffusion.single_file_flow import flow_layout
from pipelines.quant.layouts import flux_bfl_to_diffusers, flux_diffusers_to_bfl


def _prefixed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {DENOISER_PREFIX + k: v for k, v in state.items()}


@pytest.mark.parametrize(
    "config",
    [TINY_SD3, {**TINY_SD3, "num_layers": 3, "qk_norm": "rms_norm", "dual_attention_layers": (0, 1)}],
    ids=["sd3-tiny", "sd35-tiny-qk-norm-dual-attention"],
)
def test_sd3_writer_round_trips_exactly_through_diffusers_converter(config: dict) -> None:
    torch.manual_seed(0)
    state = SD3Transformer2DModel(**config).state_dict()
    back = convert_sd3_transformer_checkpoint_to_diffusers(_prefixed(sd3_transformer_to_original(state)))
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


def _meta_model(cls: type, config_dir: Path) -> torch.nn.Module:
    with init_empty_weights():
        return cls.from_config(cls.load_config(config_dir / "transformer"))


def test_released_sd35_large_layout_is_what_diffusers_reads_and_names() -> None:
    # The shipped SD3.5 Large config, on meta tensors: every name comes back, and diffusers' own guess of
    # the model type from our original names (its `joint_blocks.37` marker) is "sd35_large".
    model = _meta_model(SD3Transformer2DModel, CONFIG_DIRS["sd3"])
    original = _prefixed(sd3_transformer_to_original(model.state_dict()))
    assert infer_diffusers_model_type(original) == "sd35_large"
    back = convert_sd3_transformer_checkpoint_to_diffusers(dict(original))
    assert {k: tuple(v.shape) for k, v in back.items()} == {
        k: tuple(v.shape) for k, v in model.state_dict().items()
    }


def test_shipped_sd35_large_configs_are_the_released_sizes() -> None:
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    folder = CONFIG_DIRS["sd3"]
    assert (
        round(count(_meta_model(SD3Transformer2DModel, folder)) / 1e9, 1) == 8.1
    )  # "8.1 billion parameters"
    with init_empty_weights():
        clip_l = CLIPTextModelWithProjection(CLIPTextConfig.from_pretrained(folder / "text_encoder"))
        clip_g = CLIPTextModelWithProjection(CLIPTextConfig.from_pretrained(folder / "text_encoder_2"))
    assert count(clip_l) == 123_060_480 + 768 * 768  # OpenAI's CLIP-L text tower and its 768 x 768 projection
    assert count(clip_g) == 694_659_840  # OpenCLIP bigG, as SDXL's second encoder


def _rows_only(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict of distinct values with each tensor's row count (dim 0, the only dim the FLUX.1 layouts
    fuse and split along) and one column: FLUX.1's full width in a few MB."""
    gen = torch.Generator().manual_seed(0)
    return {k: torch.randn(v.shape[0], *([1] * (v.ndim - 1)), generator=gen) for k, v in state.items()}


@pytest.mark.parametrize("guidance", [True, False], ids=["dev", "schnell"])
def test_flux_writer_round_trips_exactly_through_diffusers_converter(guidance: bool) -> None:
    # diffusers' converter hard-codes FLUX.1's 3072 width, so the check runs at the released width (one
    # block of each kind) on narrow tensors; our size-aware reader (the loader's) must agree with it too.
    config = {
        **FluxTransformer2DModel.load_config(CONFIG_DIRS["flux1"] / "transformer"),
        "guidance_embeds": guidance,
    }
    with init_empty_weights():
        model = FluxTransformer2DModel.from_config({**config, "num_layers": 1, "num_single_layers": 1})
    state = _rows_only(model.state_dict())
    original = flux_diffusers_to_bfl(state)
    theirs = convert_flux_transformer_checkpoint_to_diffusers(_prefixed(original))
    assert set(theirs) == set(state)
    assert all(torch.equal(theirs[k], state[k]) for k in state)
    ours = flux_bfl_to_diffusers(original)
    assert all(torch.equal(ours[k], state[k]) for k in state)
    assert infer_diffusers_model_type(_prefixed(original)) == ("flux-dev" if guidance else "flux-schnell")


@pytest.mark.parametrize(
    ("keys", "layout"),
    [
        (
            [
                "model.diffusion_model.double_blocks.0.img_attn.qkv.weight",
                "text_encoders.t5xxl.transformer.x",
            ],
            "flux1",
        ),
        (
            [
                "model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight",
                "text_encoders.clip_g.transformer.x",
            ],
            "sd3",
        ),
    ],
)
def test_all_in_one_files_are_told_from_their_names(keys: list[str], layout: str) -> None:
    assert detect_single_file_family(keys + ["vae.decoder.conv_in.weight"]) == layout


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        (["model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight"], "no text encoders"),
        (["model.diffusion_model.double_blocks.0.img_attn.qkv.weight"], "Load Denoiser"),
        (["model.diffusion_model.double_stream_modulation_img.lin.weight", "text_encoders.x"], "FLUX.2"),
    ],
)
def test_files_that_are_no_whole_flux1_or_sd3_say_what_they_are(keys: list[str], says: str) -> None:
    with pytest.raises(UnsupportedModelError, match=says):
        detect_single_file_family(keys)


# --- tiny checkpoints give their folder's picture ------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir():
    """The session's data dir (tests/conftest.py), where demo models are built once and shared."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield Path(os.environ["NODELOOM_DATA_DIR"])


@pytest.fixture(scope="module")
def tiny_flux(data_dir: Path) -> tuple[Path, Path]:
    """(FLUX.1 all-in-one file, the demo folder it was written from)."""
    folder = ensure_demo_model("tiny-flux")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    path = data_dir / "flux1-schnell-fp8.safetensors"
    save_flux_single_file(pipe.transformer, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, path)
    return path, folder


@pytest.fixture(scope="module")
def tiny_sd3(data_dir: Path) -> tuple[Path, Path, Path]:
    """(SD3 all-in-one file, the demo folder it was written from, that folder with CLIP-L unprojected)."""
    folder = ensure_demo_model("tiny-sd3")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    path = data_dir / "sd3.5_large_fp8_scaled.safetensors"
    save_sd3_single_file(
        pipe.transformer, pipe.vae, (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3), path
    )
    # ComfyUI (SD3ClipModel: return_projected_pooled=False) and diffusers' single-file loader leave CLIP-L's
    # pooled vector unprojected, whatever the file holds; the demo's CLIP-L has a random projection, so the
    # reference is the same folder with that projection set to the identity.
    unprojected = data_dir / "tiny-sd3-clip-l-unprojected"
    if not (unprojected / "model_index.json").is_file():
        width = pipe.text_encoder.text_projection.weight.shape[0]
        with torch.no_grad():
            pipe.text_encoder.text_projection.weight.copy_(torch.eye(width))
        pipe.save_pretrained(str(unprojected))
    return path, folder, unprojected


def picture(spec: Path, *, config_dir: Path | None = None, cfg: float) -> torch.Tensor:
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.vae import decode
    from pipelines.diffusion.values import Latents

    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, str(spec), config_dir=config_dir)
    positive = encode_prompt(mm, model.text_encoder, "a red circle")
    negative = encode_prompt(mm, model.text_encoder, "") if cfg > 1 else None
    latents = Latents(torch.zeros(1, model.vae.latent_channels, 8, 8), model.vae.scale_factor)
    out = sample(
        mm, model.denoiser, positive, negative, latents, SamplerSettings("euler", steps=3, cfg=cfg, seed=11)
    )
    image = decode(mm, model.vae, out)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.int() - b.int()).abs().max())


@pytest.mark.slow
def test_flux1_all_in_one_gives_the_folder_picture(tiny_flux) -> None:
    path, folder = tiny_flux
    assert flow_layout(path) == "flux1"
    ours = picture(path, config_dir=folder, cfg=1.0)  # tiny shapes: the demo's configs and tokenizers
    native = picture(folder, cfg=1.0)
    assert ours.shape == (1, 64, 64, 3) and ours.float().std() > 5
    # The same float32 tensors, renamed, fused and split again: exactly the folder's picture (0 was seen).
    assert _max_diff(ours, native) <= 1


@pytest.mark.slow
def test_sd3_all_in_one_gives_the_folder_picture(tiny_sd3) -> None:
    path, folder, unprojected = tiny_sd3
    assert flow_layout(path) == "sd3"
    ours = picture(path, config_dir=folder, cfg=5.0)
    native = picture(unprojected, cfg=5.0)
    assert ours.float().std() > 5
    assert _max_diff(ours, native) <= 1  # float32 throughout, names only changed: 0 was seen
    assert _max_diff(ours, picture(folder, cfg=5.0)) > 1  # the CLIP-L projection is what the two differ in


@pytest.mark.slow
def test_all_in_one_loader_reads_headers_only_and_names_a_wrong_config(tiny_flux) -> None:
    from pipelines.diffusion.loading import load_model

    path, folder = tiny_flux
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    load_model(mm, str(path), config_dir=folder)
    assert len(mm.ledger.handles) == 4  # transformer, CLIP-L, T5, VAE
    assert all(h.module is None for h in mm.ledger.handles.values())  # nothing read until used
    with pytest.raises(UnsupportedModelError, match="config_dir"):  # the released FLUX.1 size is not this
        load_model(mm, str(path))


@pytest.mark.slow
def test_sd3_fp8_scaled_all_in_one_loads_as_comfyui_dequantizes_it(tiny_sd3, tmp_path: Path) -> None:
    # `sd3.5_large_fp8_scaled` is ComfyUI's older scaled form (a `scaled_fp8` marker, `<layer>.scale_weight`)
    # in the transformer and T5 parts; each weight must come back as `weight.float() * scale_weight`.
    from safetensors.torch import load_file, save_file

    from pipelines.diffusion.comfy_layouts.scaled_fp8 import scaled_fp8_state
    from pipelines.diffusion.loading import load_model

    path, folder, _ = tiny_sd3
    state = load_file(str(path))
    scaled: dict[str, torch.Tensor] = {}
    for prefix in (DENOISER_PREFIX, "text_encoders.t5xxl.transformer."):
        part = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
        scaled.update({prefix + k: v for k, v in scaled_fp8_state(part, legacy=True).items()})
    state.update(scaled)
    fp8 = tmp_path / "sd3.5_large_fp8_scaled.safetensors"
    save_file(state, str(fp8))
    qkv = f"{DENOISER_PREFIX}joint_blocks.0.x_block.attn.qkv"
    assert state[f"{qkv}.weight"].dtype == torch.float8_e4m3fn
    expected = state[f"{qkv}.weight"].float() * state[f"{qkv}.scale_weight"]
    mm = MemoryManager(MemoryConfig(device="cpu", policy="sequential"))
    model = load_model(mm, str(fp8), config_dir=folder)
    with mm.use(model.denoiser.handle) as transformer:
        q, k, v = (getattr(transformer.transformer_blocks[0].attn, f"to_{n}").weight for n in "qkv")
        assert torch.equal(torch.cat([q, k, v]), expected)
    assert picture(fp8, config_dir=folder, cfg=5.0).float().std() > 5


@pytest.mark.slow
def test_flux1_all_in_one_reads_its_vae_under_either_prefix(tiny_flux, tmp_path: Path) -> None:
    # ComfyUI saves FLUX.1's VAE under `vae.` (supported_models.Flux.vae_key_prefix); files made by other tools
    # use the LDM `first_stage_model.`, which diffusers' converter reads too.
    from safetensors.torch import load_file, save_file

    path, folder = tiny_flux
    renamed = {
        "first_stage_model." + k.removeprefix("vae.") if k.startswith("vae.") else k: v
        for k, v in load_file(str(path)).items()
    }
    other = tmp_path / "flux1-ldm-vae.safetensors"
    save_file(renamed, str(other))
    assert (
        _max_diff(picture(other, config_dir=folder, cfg=1.0), picture(path, config_dir=folder, cfg=1.0)) == 0
    )
