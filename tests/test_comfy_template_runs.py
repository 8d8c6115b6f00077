"""ComfyUI's published image templates run here: each family's template, imported against a ComfyUI models
folder holding tiny demo models under the template's own file names (`write_comfy_files`, then linked under
the names the template asks for) and a picture under each of its Load Image names, passes `app check`
and gives the picture of our native graph (the same workflow reading the demo's diffusers folder) with the same
settings; the SDXL and SD 1.5 checkpoint templates on tiny single files and FLUX.1 [dev]'s on tiny split files
(FLUX.1 Kontext's too: its reference picture) give the folder's picture. Skipped
without ComfyUI's template package (`pip install comfyui-workflow-templates-json`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.comfy_layout_support import comfy_fixture, run_graph
from tests.template_runs import (
    import_template,
    max_diff,
    native_graph,
    place_loras,
    place_pictures,
    place_under_template_names,
    small_kontext_scale,
    template_file,
    write_flux1_files,
)

pytestmark = pytest.mark.slow  # each case builds a tiny model and runs two graphs (a few seconds)

# template -> (family, the settings both runs get). Tiny sizes and 3 steps keep each run to seconds; odd
# sizes on purpose (nothing assumes square). The edit templates scale their input picture to 0.01 MP (about
# 112 x 96 here, sides multiples of 16), which sizes the latent.
_EDIT = {"image_scale_to_total_pixels.megapixels": 0.01, "image_scale_to_total_pixels.resolution_steps": 16}
_CUSTOM = {"sampler_custom_advanced.steps": 3, "sampler_custom_advanced.seed": 42}
_KSAMPLER = {"ksampler.steps": 3, "ksampler.seed": 42}
_SD3_SIZE = {"empty_sd3_latent_image.width": 40, "empty_sd3_latent_image.height": 56}
CASES = {
    "image_z_image_turbo": ("zimage", {**_SD3_SIZE, **_KSAMPLER}),
    "image_qwen_Image_2512": ("qwenimage", {**_SD3_SIZE, **_KSAMPLER}),
    # FLUX.2 edits: the picture's latent joins as a reference (ReferenceLatent), [dev] with FluxGuidance.
    "image_flux2": ("flux2_dev", {**_EDIT, **_CUSTOM}),
    "image_flux2_klein_image_edit_4b_distilled": ("flux2_klein", {**_EDIT, **_CUSTOM}),
    # Qwen-Image-Edit 2509 with its Lightning LoRA switched on (a tiny LoRA under its name), the pictures read
    # by Qwen2.5-VL at 56 x 56 and as references at about 48 x 32.
    "image_qwen_image_edit_2509": (
        "qwenimage_edit",
        {
            **_KSAMPLER,
            **{f"text_encode_qwen_image_edit_plus{s}.vae_pixels": 48 * 32 for s in ("", "_2")},
            **{f"text_encode_qwen_image_edit_plus{s}.vl_pixels": 56 * 56 for s in ("", "_2")},
        },
    ),
}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """family -> (the demo's diffusers folder, a ComfyUI root with its files in models/), built once."""
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    out = {}
    for family in sorted({family for family, _ in CASES.values()}):
        out[family] = comfy_fixture(family, tmp_path_factory.mktemp(family))
    return out


@pytest.mark.parametrize("template", sorted(CASES))
def test_template_on_its_own_file_names_gives_the_native_picture(
    template: str, fixtures: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    family, sets = CASES[template]
    folder, root = fixtures[family]
    models = root / "models"
    # The tiny weights also under the names this template asks for (flux-2-klein-4b-fp8.safetensors, ...).
    place_under_template_names(template, family, models)
    place_pictures(template, root)
    place_loras(template, models, folder, family)
    dirs = ("--models-dir", str(models))
    imported = tmp_path / f"{template}.nodeloom.json"
    # The Kontext size is about a megapixel: 48 x 32 here, in both runs.
    workflow = small_kontext_scale(import_template(template, models, imported), 48, 32)
    imported.write_text(json.dumps(workflow), encoding="utf-8")
    ours = run_graph(imported, tmp_path / "files", sets, dirs)
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets, dirs)
    assert native[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's files instead of the folder: identical pictures, or 1/255
    # apart where a value sits on a rounding edge (seen on the FLUX.2 edits' decode).
    assert max_diff(ours, native) <= 1


# Checkpoint templates (one file, CheckpointLoaderSimple): template -> (demo, the file name it asks for, the
# JSON, sets). SD 1.5's template is the vendored copy of ComfyUI's default workflow (tests/data/comfy/real):
# the package has no SD 1.5 template.
_REAL = Path(__file__).resolve().parent / "data" / "comfy" / "real"
_CHECKPOINT_SETS = {
    "empty_latent_image.width": 64,
    "empty_latent_image.height": 48,
    "ksampler.steps": 3,
    "ksampler.seed": 42,
}
CHECKPOINTS = {
    "image_sdxl_simple": ("tiny-sdxl", "sd_xl_base_1.0.safetensors"),
    "sd15_default": ("tiny-sd", "v1-5-pruned-emaonly-fp16.safetensors"),
}


@pytest.mark.parametrize("template", sorted(CHECKPOINTS))
def test_checkpoint_template_on_a_tiny_single_file_gives_the_folder_picture(
    template: str, tmp_path: Path
) -> None:
    from diffusers import DiffusionPipeline

    from app.main import main
    from pipelines.diffusion.demo_models import save_demo_model
    from pipelines.diffusion.export import save_sd1_single_file, save_sdxl_single_file

    demo, file_name = CHECKPOINTS[template]
    source = _REAL / f"{template}.json" if template == "sd15_default" else template_file(template)
    folder = save_demo_model(demo, tmp_path / demo)
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    models = tmp_path / "ComfyUI" / "models"
    (models / "checkpoints").mkdir(parents=True)
    checkpoint = models / "checkpoints" / file_name  # the original (CompVis / SGM) layout, as released
    if demo == "tiny-sdxl":
        save_sdxl_single_file(pipe.unet, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, checkpoint)
    else:
        save_sd1_single_file(pipe.unet, pipe.vae, pipe.text_encoder, checkpoint)
    imported = tmp_path / f"{template}.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(imported), *dirs]) == 0
    # The tiny shapes are no released size: the checkpoint reads its config from the demo's folder.
    ours = run_graph(
        imported, tmp_path / "file", {**_CHECKPOINT_SETS, "load_checkpoint.config_dir": folder}, dirs
    )
    native = run_graph(
        imported, tmp_path / "folder", {**_CHECKPOINT_SETS, "load_checkpoint.path": folder}, dirs
    )
    assert native[0].std() > 5
    # The same float32 weights, renamed to the original layout and back: identical pictures were seen.
    assert max_diff(ours, native) <= 1


# FLUX.1 templates on the tiny Flux's parts (tests/template_runs.write_flux1_files): template -> (file names,
# the settings both runs get). Kontext's reference picture is scaled to 48 x 32 (its Kontext size is a
# megapixel); the latent's size comes from the EmptySD3LatentImage in [dev] and from that picture in Kontext.
FLUX1 = {
    "flux_dev_full_text_to_image": (
        {"denoiser": "flux1-dev.safetensors", "clip_l": "clip_l.safetensors", "t5": "t5xxl_fp16.safetensors"},
        {"empty_sd3_latent_image.width": 64, "empty_sd3_latent_image.height": 48, **_KSAMPLER},
    ),
    "flux_kontext_dev_basic": (
        {
            "denoiser": "flux1-dev-kontext_fp8_scaled.safetensors",
            "clip_l": "clip_l.safetensors",
            "t5": "t5xxl_fp8_e4m3fn_scaled.safetensors",
        },
        _KSAMPLER,
    ),
}


@pytest.mark.parametrize("template", sorted(FLUX1))
def test_flux1_template_on_tiny_split_files_gives_the_folder_picture(template: str, tmp_path: Path) -> None:
    from pipelines.diffusion.demo_models import save_demo_model

    template_file(template)  # skips before building anything when the templates package is absent
    names, sets = FLUX1[template]
    folder = save_demo_model("tiny-flux", tmp_path / "tiny-flux")
    root = tmp_path / "ComfyUI"
    models = root / "models"
    write_flux1_files(folder, models, {**names, "vae": "ae.safetensors"})
    place_pictures(template, root)
    dirs = ("--models-dir", str(models))
    imported = tmp_path / f"{template}.nodeloom.json"
    workflow = small_kontext_scale(import_template(template, models, imported), 48, 32)
    imported.write_text(json.dumps(workflow), encoding="utf-8")
    # The tiny shapes are no released size: each split loader reads its config from the demo's folder.
    configs = {f"{n}.config_dir": folder for n in ("load_unet", "load_clip", "load_vae")}
    ours = run_graph(imported, tmp_path / "files", {**sets, **configs}, dirs)
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets, dirs)
    assert native[0].std() > 5
    # The same float32 weights, the VAE renamed to the original layout and back: identical pictures were seen.
    assert max_diff(ours, native) <= 1
