"""ComfyUI's file layout for Z-Image, Qwen-Image, FLUX.2 and Wan: names, fp8 scales, detection, shipped configs.

The pictures these files give (against the diffusers folders) are in tests/test_comfy_layouts_runs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, is_scaled_fp8, scaled_fp8_state


@pytest.mark.parametrize("legacy", [False, True])
def test_scaled_fp8_weights_read_back_as_weight_times_scale(legacy: bool) -> None:
    torch.manual_seed(0)
    state = {"a.weight": torch.randn(8, 16) * 3, "a.bias": torch.randn(8), "norm.weight": torch.randn(16)}
    stored = scaled_fp8_state(state, legacy=legacy)
    assert stored["a.weight"].dtype == torch.float8_e4m3fn
    assert (
        stored["a.bias"].dtype == torch.float32 and stored["norm.weight"].dtype == torch.float32
    )  # kept plain
    scale_key = "a.scale_weight" if legacy else "a.weight_scale"
    assert is_scaled_fp8(stored) and not is_scaled_fp8(state)
    if not legacy:  # ComfyUI's per-layer format tag
        assert json.loads(bytes(stored["a.comfy_quant"].tolist())) == {"format": "float8_e4m3fn"}
    read = dequantize_stubs(stored)
    assert set(read) == set(state)  # scales and markers are gone
    by_hand = stored["a.weight"].to(torch.float32) * stored[scale_key].to(torch.float32)
    assert torch.equal(read["a.weight"], by_hand)
    # e4m3 keeps 3 mantissa bits: round to nearest is within 2**-4 of each value, and within the smallest
    # subnormal step (2**-9 in fp8 units, `scale` each) near zero.
    scale = state["a.weight"].abs().max() / 448
    error = (read["a.weight"] - state["a.weight"]).abs()
    assert torch.all(error <= state["a.weight"].abs() / 16 + scale * 2**-9)
    assert torch.equal(read["a.bias"], state["a.bias"])


def test_file_kinds_are_told_from_comfyui_names() -> None:
    from pipelines.diffusion.comfy_layouts.loaders import denoiser_layout
    from pipelines.diffusion.comfy_layouts.text_encoders import text_encoder_kind
    from pipelines.diffusion.comfy_layouts.vaes import vae_layout

    p = "model.diffusion_model."
    assert denoiser_layout(
        [f"{p}cap_embedder.1.weight", f"{p}noise_refiner.0.attention.qkv.weight", f"{p}context_refiner.0.x"]
    ) == ("zimage", "comfy")
    assert denoiser_layout(
        ["double_stream_modulation_img.lin.weight", "double_blocks.0.img_attn.qkv.weight"]
    ) == ("flux2_klein", "comfy")
    assert denoiser_layout(["double_stream_modulation_img.lin.weight", "guidance_in.in_layer.weight"]) == (
        "flux2_dev",
        "comfy",
    )
    assert denoiser_layout(["txt_norm.weight", "img_in.weight", "transformer_blocks.0.img_mod.1.weight"]) == (
        "qwenimage",
        "comfy",
    )
    assert denoiser_layout(["head.modulation", "blocks.0.self_attn.q.weight"]) == ("wan", "comfy")
    assert (
        denoiser_layout(["double_blocks.0.img_attn.qkv.weight", "img_in.weight"]) is None
    )  # FLUX.1: not ours
    assert text_encoder_kind(["model.layers.0.self_attn.q_norm.weight"]) == "qwen3"
    assert (
        text_encoder_kind(["model.layers.0.self_attn.q_proj.bias", "visual.blocks.0.attn.qkv.weight"])
        == "qwen2.5-vl"
    )
    assert text_encoder_kind(["model.layers.0.self_attn.q_proj.weight"]) == "mistral"
    assert (
        text_encoder_kind(["encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"]) == "umt5"
    )
    assert (
        text_encoder_kind(["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]) is None
    )  # T5
    assert (
        vae_layout(["encoder.downsamples.0.residual.0.gamma", "decoder.upsamples.0.residual.0.gamma"])
        == "wan"
    )
    assert vae_layout(["bn.running_mean", "encoder.down.0.block.0.conv1.weight"]) == "flux2"
    assert vae_layout(["encoder.down.0.block.0.conv1.weight"]) is None  # SD / Flux: the existing loader's


def test_comfyui_template_file_names_and_clip_types_name_their_family() -> None:
    from nodes.comfy.mapping import COMFY_TEXT_ENCODER_TYPES
    from pipelines.diffusion.family_detect import family_from_file_name

    assert family_from_file_name("z_image_turbo_bf16.safetensors") == "zimage"
    assert family_from_file_name("qwen_image_fp8_e4m3fn.safetensors") == "qwenimage"
    assert family_from_file_name("flux-2-klein-4b-fp8.safetensors") == "flux2_klein"
    assert family_from_file_name("flux2_dev_fp8mixed.safetensors") == "flux2_dev"
    assert family_from_file_name("wan2.1_t2v_1.3B_fp16.safetensors") == "wan"
    assert family_from_file_name("flux1-dev-fp8.safetensors") == "flux"  # FLUX.1 stays FLUX.1
    assert {t: COMFY_TEXT_ENCODER_TYPES[t] for t in ("lumina2", "qwen_image", "wan")} == {
        "lumina2": "zimage",
        "qwen_image": "qwenimage",
        "wan": "wan",
    }


@pytest.mark.slow  # imports diffusers, builds the tiny transformers and a full-size VAE on the meta device (~15 s)
def test_names_round_trip_through_diffusers_converters() -> None:
    from accelerate import init_empty_weights
    from diffusers import (
        AutoencoderKLWan,
        Flux2Transformer2DModel,
        WanTransformer3DModel,
        ZImageTransformer2DModel,
    )
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    from pipelines.diffusion.comfy_layouts.keys import (
        transformer_from_diffusers,
        transformer_to_diffusers,
        vae_from_diffusers,
        vae_to_diffusers,
        wan_vae_table,
    )
    from pipelines.diffusion.demo_flux2 import TINY_FLUX2
    from pipelines.diffusion.demo_wan import TINY_WAN, TINY_WAN_VAE
    from pipelines.diffusion.demo_zimage import TINY_ZIMAGE

    torch.manual_seed(0)
    models = {
        "zimage": ZImageTransformer2DModel(**TINY_ZIMAGE),
        "flux2": Flux2Transformer2DModel(**{**TINY_FLUX2, "guidance_embeds": True}),
        "wan": WanTransformer3DModel(**TINY_WAN),
    }
    markers = {
        "zimage": "noise_refiner.0.attention.qkv.weight",
        "flux2": "double_blocks.0.img_attn.qkv.weight",
        "wan": "head.modulation",
    }
    for layout, model in models.items():
        state = model.state_dict()
        comfy = transformer_from_diffusers(layout, state)
        assert (
            markers[layout] in comfy
        )  # ComfyUI's names (comfy/model_detection.py), fused where ComfyUI fuses
        back = transformer_to_diffusers(layout, dict(comfy))
        assert set(back) == set(state), layout
        assert all(torch.equal(back[k], state[k]) for k in state), layout
    vae = AutoencoderKLWan(**TINY_WAN_VAE)
    state = vae.state_dict()
    comfy = vae_from_diffusers("wan", state, dict(vae.config))
    assert "decoder.upsamples.2.resample.1.weight" in comfy  # stage 0's upsampler after its 2 resnets
    assert all(
        torch.equal(v, state[k])
        for k, v in vae_to_diffusers("wan", comfy, dict(vae.config), list(state)).items()
    )
    # At the released size our sized table names every tensor as diffusers' own (hard-coded) converter does:
    # each original name carries a distinct value through the converter.
    with init_empty_weights():
        full = AutoencoderKLWan()
    table = wan_vae_table(list(full.state_dict()))
    tagged = {name: torch.tensor([float(i)]) for i, name in enumerate(table)}
    theirs = convert_wan_vae_to_diffusers(dict(tagged))
    assert {k: int(v.item()) for k, v in theirs.items()} == {
        d: int(tagged[o].item()) for o, d in table.items()
    }


@pytest.mark.slow  # builds the five tiny demo pipelines (~10 s)
def test_shipped_tiny_config_folders_are_the_demo_models_configs(tmp_path: Path) -> None:
    from pipelines.diffusion.comfy_layouts.variants import TINY_SOURCES, VARIANTS
    from pipelines.diffusion.comfy_layouts.writer import write_config_folder
    from tests.comfy_layout_support import config_content
    from tests.demo_support import copy_demo_model

    for variant in VARIANTS:
        if variant.name not in TINY_SOURCES:
            continue
        fresh = write_config_folder(
            copy_demo_model(TINY_SOURCES[variant.name], tmp_path / variant.name),
            tmp_path / f"{variant.name}-config",
        )
        shipped = sorted(p.relative_to(variant.folder) for p in variant.folder.rglob("*") if p.is_file())
        assert shipped == sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()), variant.name
        for rel in shipped:  # a rebuild of the demo gives the shipped files: refresh them with writer.py
            assert config_content(variant.folder / rel) == config_content(fresh / rel), (
                f"{variant.name}/{rel}"
            )


def test_the_models_library_detects_comfyui_transformer_files_by_their_names() -> None:
    from pipelines.diffusion.family_detect import family_from_keys

    flux2 = ["double_stream_modulation_img.lin.weight", "double_blocks.0.img_attn.qkv.weight"]
    assert family_from_keys(flux2, {}) == "flux2_klein"
    assert family_from_keys([*flux2, "guidance_in.in_layer.weight"], {}) == "flux2_dev"
    assert family_from_keys(["head.modulation", "blocks.0.self_attn.q.weight"], {}) == "wan"
    assert (
        family_from_keys(["cap_embedder.1.weight", "noise_refiner.0.x", "context_refiner.0.x"], {})
        == "zimage"
    )
    assert family_from_keys(["txt_norm.weight", "transformer_blocks.0.img_mod.1.weight"], {}) == "qwenimage"


@pytest.mark.slow  # builds full-size models on the meta device (~10 s)
@pytest.mark.parametrize(
    ("family", "folder"),
    [
        ("zimage", "zimage-turbo"),
        ("qwenimage", "qwen-image"),
        ("wan", "wan2.1-t2v-1.3b"),
        ("wan", "wan2.1-t2v-14b"),
        ("wan", "wan2.1-i2v-14b"),
        ("wan", "wan2.1-flf2v-14b"),  # the I2V size plus the two frames' positions (img_emb.emb_pos)
    ],
)
def test_a_released_size_in_comfyui_names_picks_its_shipped_config(family: str, folder: str) -> None:
    from accelerate import init_empty_weights

    from pipelines.diffusion.assembly import read_json
    from pipelines.diffusion.comfy_layouts.keys import (
        LAYOUTS,
        transformer_from_diffusers,
        transformer_to_diffusers,
    )
    from pipelines.diffusion.comfy_layouts.variants import (
        folder_of,
        module_shapes,
        pick_variant,
        variants_for,
    )
    from pipelines.diffusion.families import FAMILIES
    from pipelines.quant.split import module_factory

    fam = FAMILIES[family]
    [variant] = [v for v in variants_for([family]) if v.name == folder]
    config = read_json(variant.folder / "transformer" / "config.json")
    with init_empty_weights():
        model = fam.denoiser_class.from_config(config)
    comfy = transformer_from_diffusers(LAYOUTS[family], model.state_dict())  # what the released file holds
    shapes = {k: tuple(v.shape) for k, v in transformer_to_diffusers(LAYOUTS[family], comfy).items()}

    def wanted(v: object) -> dict:
        c = read_json(folder_of(v) / "transformer" / "config.json")
        return module_shapes(lambda: fam.denoiser_class.from_config(c))

    assert (
        pick_variant(variants_for([family]), shapes, wanted, what="transformer", file_name="x").name == folder
    )
    # The folder's text encoder and VAE configs build too (no tokenizer is shipped for released sizes).
    slot = fam.text_encoders[0]
    assert module_shapes(module_factory(slot.model_class, variant.folder / slot.subfolder))
    assert module_shapes(lambda: fam.vae_class.from_config(read_json(variant.folder / "vae" / "config.json")))
