"""Small pieces of pipelines/diffusion on their own: dtype choice, schedulers, previews, demo models,
the CLIP tokenizer built from OpenAI's BPE merges file, the node declarations."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, EulerDiscreteScheduler
from PIL import Image
from safetensors.torch import load_file

from nodes.diffusion import NODES
from pipelines.diffusion.assembly import vae_dtype
from pipelines.diffusion.demo_models import DEMO_MODELS, ensure_demo_model, make_all_demo_models
from pipelines.diffusion.families import FAMILIES, resolve_dtype
from pipelines.diffusion.previews import latent_preview
from pipelines.diffusion.schedulers import SCHEDULER_NAMES, make_scheduler
from pipelines.diffusion.single_file import clip_tokenizer_from_bpe


def test_dtype_auto_is_float32_on_cpu_and_the_family_half_type_on_cuda() -> None:
    for family in FAMILIES.values():
        assert resolve_dtype("auto", family, "cpu") == torch.float32
        assert resolve_dtype("auto", family, "cuda:0") == family.cuda_dtype
        assert resolve_dtype("bfloat16", family, "cpu") == torch.bfloat16


def test_sdxl_vae_stays_float32_when_the_rest_is_float16() -> None:
    assert vae_dtype(FAMILIES["sdxl"], {"force_upcast": True}, torch.float16) == torch.float32
    assert vae_dtype(FAMILIES["sdxl"], {"force_upcast": True}, torch.bfloat16) == torch.bfloat16
    assert vae_dtype(FAMILIES["sd"], {}, torch.float16) == torch.float16


def test_schedulers_keep_the_model_betas_and_are_fresh_each_time() -> None:
    scheduler = EulerDiscreteScheduler(beta_start=0.001, beta_end=0.02, prediction_type="v_prediction")
    config = {**scheduler.config, "_class_name": "EulerDiscreteScheduler"}  # as scheduler_config.json has it
    a = make_scheduler("dpmpp_2m", config)
    assert isinstance(a, DPMSolverMultistepScheduler)
    assert a.config.algorithm_type == "dpmsolver++" and a.config.solver_order == 2
    assert a.config.prediction_type == "v_prediction" and a.config.beta_end == 0.02
    assert make_scheduler("default", config).__class__ is EulerDiscreteScheduler
    assert make_scheduler("dpmpp_2m", config) is not a
    assert set(SCHEDULER_NAMES) >= {"euler", "euler_ancestral", "dpmpp_2m", "ddim", "unipc"}
    with pytest.raises(ValueError, match="unknown scheduler"):
        make_scheduler("lms_karras", config)


def test_latent_preview_is_a_small_rgb_image() -> None:
    image = latent_preview(torch.randn(2, 4, 8, 12), FAMILIES["sd"])
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    assert image.size == (12 * 21, 8 * 21)  # nearest-neighbour upscale to at most 256 px


@pytest.mark.slow  # over 5 s in the fast lane on a loaded 2-core machine
def test_demo_models_are_deterministic(tmp_path: Path) -> None:
    a = ensure_demo_model("tiny-sd", root=tmp_path / "a")
    b = ensure_demo_model("tiny-sd", root=tmp_path / "b")
    for sub in ("unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors"):
        x, y = load_file(a / sub), load_file(b / sub)
        assert all(torch.equal(x[k], y[k]) for k in x)
    made = make_all_demo_models(tmp_path / "a")
    assert set(made) == set(DEMO_MODELS) and all((p / "model_index.json").exists() for p in made.values())


def test_clip_tokenizer_from_openai_bpe_file(tmp_path: Path) -> None:
    # A BPE file in OpenAI's format (header line, then merges) with two merges; ids must follow
    # open_clip's order: 256 byte chars, the same with </w>, merges, then the two special tokens.
    bpe = tmp_path / "bpe_simple_vocab_16e6.txt.gz"
    with gzip.open(bpe, "wt", encoding="utf-8") as f:
        f.write('"bpe_simple_vocab_16e6.txt#version: 0.2\nc a\nca t</w>\n')
    tokenizer = clip_tokenizer_from_bpe(bpe)
    vocab = tokenizer.get_vocab()
    assert vocab["ca"] == 512 and vocab["cat</w>"] == 513
    assert vocab["<|startoftext|>"] == 514 and vocab["<|endoftext|>"] == 515
    assert tokenizer("cat").input_ids == [514, 513, 515]


def test_node_declarations() -> None:
    by_type = {spec.type: spec for spec in NODES}
    assert set(by_type) == {
        "LoadDiffusionModel",
        "LoadDenoiser",
        "LoadTextEncoder",
        "LoadVAE",
        "TextEncode",
        "EmptyLatent",
        "Sampler",
        "VAEDecode",
        "VAEEncode",
    }
    load = by_type["LoadDiffusionModel"]
    assert load.param("path").default == "builtin:shapes-sd"
    assert load.param("kind").choices == ("auto", "folder", "single_file")
    assert load.param("dtype").choices == (
        "auto",
        "float32",
        "float16",
        "bfloat16",
        "fp8_e4m3fn",
        "fp8_e5m2",
        "int8",
    )
    assert [o.name for o in load.outputs] == ["denoiser", "text_encoder", "vae"]
    assert by_type["TextEncode"].param("text").kind == "text"
    sampler = by_type["Sampler"]
    assert sampler.param("seed").kind == "seed"
    assert {"euler", "euler_ancestral", "dpmpp_2m", "ddim", "unipc"} <= set(
        sampler.param("scheduler").choices
    )
