"""ComfyUI's LTX-2 files (`pipelines/diffusion/comfy_layouts/ltx2*.py`): the one-file checkpoint's and the Gemma 3
file's names to and from diffusers' LTX-2 classes (tiny, LTX-2.3's extra modules, and the released video VAE's
block table against diffusers' own converter), the family read from the files, an fp8 "scaled" checkpoint
read dequantized, the messages for a Gemma file without its checkpoint and for the checkpoint's text encoder
wire, and `app check` of the text-to-video template finding every file the tiny models were written as.
(The template run from these files: tests/test_ltx2_template_run.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.diffusion.comfy_layouts import ltx2

_LTX23 = dict(gated_attn=True, cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True)


def _shapes(make) -> dict[str, tuple[int, ...]]:
    from pipelines.diffusion.comfy_layouts.variants import module_shapes

    return module_shapes(make)


def _modules() -> dict[str, tuple[str, object]]:
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    from pipelines.diffusion import demo_ltx2 as d

    return {
        "transformer": ("transformer", lambda: LTX2VideoTransformer3DModel(**d.TINY_LTX2)),
        "transformer-2.3": (
            "transformer",
            lambda: LTX2VideoTransformer3DModel(**d.TINY_LTX2, **_LTX23, use_prompt_embeddings=False),
        ),
        "connectors": ("connectors", lambda: LTX2TextConnectors(**d.TINY_LTX2_CONNECTORS)),
        "connectors-2.3": (
            "connectors",
            lambda: LTX2TextConnectors(
                **d.TINY_LTX2_CONNECTORS,
                per_modality_projections=True,
                video_hidden_dim=16,
                audio_hidden_dim=8,
            ),
        ),
        "vae": ("vae", lambda: AutoencoderKLLTX2Video(**d.TINY_LTX2_VAE)),
        "audio_vae": ("audio_vae", lambda: AutoencoderKLLTX2Audio(**d.TINY_LTX2_AUDIO_VAE)),
        "vocoder": ("vocoder", lambda: LTX2Vocoder(**d.TINY_LTX2_VOCODER)),
    }


@pytest.mark.parametrize("name", list(_modules()))
def test_each_checkpoint_part_reads_back_in_the_modules_names(name: str) -> None:
    part, make = _modules()[name]
    names = list(_shapes(make))
    stubs = {k: torch.empty(0) for k in names}
    original = ltx2.part_from_diffusers(part, stubs)
    assert sorted(ltx2.part_to_diffusers(part, original, names)) == sorted(names)
    assert sorted(ltx2.part_keys(part, list(original))) == sorted(original)  # the parts do not overlap
    if name == "transformer-2.3":  # Lightricks' names for the LTX-2.3 prompt AdaLNs (diffusers renames them)
        assert any(k.startswith("model.diffusion_model.prompt_adaln_single.") for k in original)
        assert any(k.startswith("model.diffusion_model.audio_prompt_adaln_single.") for k in original)
    if name == "connectors-2.3":
        assert "text_embedding_projection.video_aggregate_embed.weight" in original


def test_the_released_video_vae_table_is_diffusers_own() -> None:
    """At LTX-2.0's released size (four stages) the table sized from the module gives the names diffusers'
    hard-coded converter gives."""
    from diffusers import AutoencoderKLLTX2Video
    from diffusers.loaders.single_file_utils import convert_ltx2_vae_to_diffusers

    names = list(_shapes(AutoencoderKLLTX2Video))
    original = ltx2.part_from_diffusers("vae", {k: torch.empty(0) for k in names})
    assert any(k.startswith("vae.decoder.up_blocks.6.res_blocks.") for k in original)
    assert sorted(convert_ltx2_vae_to_diffusers(dict(original))) == sorted(names)


def test_gemma_names_read_back_and_the_file_is_told_apart() -> None:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    from pipelines.diffusion.demo_ltx2 import TINY_GEMMA3

    names = list(_shapes(lambda: Gemma3ForConditionalGeneration(Gemma3Config(**TINY_GEMMA3))))
    comfy = ltx2.gemma_from_diffusers({k: torch.empty(0) for k in names})
    assert "model.layers.0.pre_feedforward_layernorm.weight" in comfy and ltx2.is_gemma3_file(comfy)
    assert any(k.startswith("vision_model.") for k in comfy)
    assert sorted(ltx2.gemma_to_diffusers(comfy)) == sorted(n for n in names if n != "lm_head.weight")
    assert not ltx2.is_ltx2_checkpoint(comfy)


# --- on files -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the tiny folder, its ComfyUI files plain, the same fp8-scaled)."""
    from pipelines.diffusion.comfy_layouts.ltx2_writer import write_ltx2_files
    from tests.demo_support import copy_demo_model

    root = tmp_path_factory.mktemp("ltx2-comfy")
    folder = copy_demo_model("tiny-ltx2", root / "tiny-ltx2")
    return (
        folder,
        write_ltx2_files(folder, root / "plain"),
        write_ltx2_files(folder, root / "fp8", scaled_fp8=True),
    )


def _checkpoint(models: Path) -> Path:
    return models / "checkpoints" / ltx2.LTX2_FILES["checkpoint"]


def _gemma(models: Path) -> Path:
    return models / "text_encoders" / ltx2.LTX2_FILES["text_encoder"]


@pytest.mark.slow  # builds and saves the tiny model
def test_the_checkpoint_is_detected_as_ltx2(files) -> None:
    from pipelines.diffusion.family_detect import detect_family

    _, plain, fp8 = files
    assert detect_family(_checkpoint(plain)) == detect_family(_checkpoint(fp8)) == "ltx2"


@pytest.mark.slow  # builds the tiny model and loads its transformer
def test_an_fp8_scaled_checkpoint_reads_within_fp8_of_the_weights(files, cpu_memory) -> None:
    from diffusers import LTX2VideoTransformer3DModel

    from pipelines.diffusion.comfy_layouts.ltx2_loaders import load_ltx2_checkpoint

    folder, _, fp8 = files
    loaded = load_ltx2_checkpoint(cpu_memory, _checkpoint(fp8))
    want = LTX2VideoTransformer3DModel.from_pretrained(str(folder), subfolder="transformer").state_dict()
    with cpu_memory.use(loaded.denoiser.handle) as model:
        got = {k: v.detach().cpu().float() for k, v in model.state_dict().items()}
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        if w.ndim == 2 and name.endswith(".weight"):
            # float8_e4m3fn keeps 3 mantissa bits: within 1/16 of a value near the absmax, and below the
            # smallest normal (2^-6 of 448) an absolute step of 2^-9 of the scale.
            step = w.abs().max() / 448.0
            assert (got[name] - w).abs().max() <= max(w.abs().max() / 16, step * 2**-9 * 448), name
        else:  # biases, norms, tables: stored as they are
            assert torch.equal(got[name], w.float()), name


@pytest.mark.slow  # builds the tiny model
@pytest.mark.parametrize("family", ["ltx2", "auto"])  # LTXAVTextEncoderLoader's, or a plain Load Text Encoder
def test_a_gemma_file_without_its_checkpoint_says_what_to_add(files, cpu_memory, family: str) -> None:
    from pipelines.diffusion.families import UnsupportedModelError
    from pipelines.quant.split_files import load_text_encoder_files

    _, plain, _ = files
    with pytest.raises(UnsupportedModelError, match="'path_2': give the LTX-2 checkpoint"):
        load_text_encoder_files(cpu_memory, [_gemma(plain)], family=family)


@pytest.mark.slow  # builds the tiny model
def test_the_checkpoints_text_encoder_wire_says_where_gemma_is(files, cpu_memory) -> None:
    from pipelines.diffusion.comfy_layouts.ltx2_loaders import load_ltx2_checkpoint
    from pipelines.diffusion.families import UnsupportedModelError

    _, plain, _ = files
    loaded = load_ltx2_checkpoint(cpu_memory, _checkpoint(plain))
    with pytest.raises(UnsupportedModelError, match="Load Text Encoder Files"):
        loaded.text_encoder.handles[0].spec.build()


@pytest.mark.slow  # builds the tiny model
def test_the_text_to_video_template_finds_every_file_but_the_loras(files, tmp_path: Path, capsys) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    from app.main import main
    from benchmarks.comfy_templates import templates_folder

    _, plain, _ = files
    (plain / "latent_upscale_models").mkdir(exist_ok=True)
    (plain / "latent_upscale_models" / "ltx-2.3-spatial-upscaler-x2-1.1.safetensors").write_bytes(b"{}")
    template = templates_folder() / "video_ltx2_3_t2v.json"
    assert main(["check", str(template), "--json", "--models-dir", str(plain)]) == 2
    (report,) = json.loads(capsys.readouterr().out)
    # The checkpoint is found for the audio VAE and the connectors too (ComfyUI reads them from checkpoints/),
    # the Gemma file in text_encoders/, the upsampler in latent_upscale_models/: only the LoRAs are missing.
    assert {p["kind"] for p in report["problems"]} == {"missing-model"}, report["problems"]
    assert all(p["node"].startswith("load_lora") for p in report["problems"]), report["problems"]


@pytest.mark.slow  # builds the 19B transformer on the meta device (seconds)
def test_a_released_size_checkpoint_takes_the_shipped_19b_config() -> None:
    from pipelines.diffusion.assembly import read_json
    from pipelines.diffusion.comfy_layouts.ltx2_loaders import _maker
    from pipelines.diffusion.comfy_layouts.variants import pick_variant, variants_for

    folder = ltx2_released_folder()
    names = _shapes(_maker(folder, "transformer"))
    original = ltx2.part_from_diffusers(
        "transformer", {k: torch.empty(s, device="meta") for k, s in names.items()}
    )
    shapes = {k: tuple(v.shape) for k, v in ltx2.part_to_diffusers("transformer", original).items()}
    built = {"ltx-2-19b": names}  # built once: a second 19B module on meta takes seconds

    def wanted(v):
        return built.get(v.name) or _shapes(_maker(v.folder, "transformer"))

    variant = pick_variant(variants_for(["ltx2"]), shapes, wanted, what="checkpoint", file_name="19b")
    assert variant.name == "ltx-2-19b"
    # The parts agree with each other: Gemma's stacked states are what the connectors project.
    gemma = read_json(folder / "text_encoder" / "config.json")["text_config"]
    connectors = read_json(folder / "connectors" / "config.json")
    stacked = gemma["hidden_size"] * (gemma["num_hidden_layers"] + 1)
    assert connectors["caption_channels"] * connectors["text_proj_in_factor"] == stacked
    assert read_json(folder / "transformer" / "config.json")["caption_channels"] == gemma["hidden_size"]


def ltx2_released_folder() -> Path:
    from pipelines.paths import RESOURCES_DIR

    return RESOURCES_DIR / "configs" / "ltx-2-19b"
