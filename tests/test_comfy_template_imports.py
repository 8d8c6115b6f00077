"""ComfyUI's published image templates of the families that run here import with every node mapped and pass
`app check` apart from model files (no models folder given), with each loader in the template's family: the
Z-Image ones as Z-Image (not Lumina 2), their `ae.safetensors` as Z-Image's VAE, the Qwen-Image-Edit ones with
the edit family's text encoder feeding our edit prompt nodes. Skipped without ComfyUI's template package
(`pip install comfyui-workflow-templates-json`).
"""

from __future__ import annotations

import json

import pytest

from nodes.comfy.edit_nodes import kontext_size
from nodes.comfy.sources import check_comfy, import_comfy_data
from tests.template_runs import template_file

# template -> the family every split loader of it is given.
FAMILY_OF = {
    "image_z_image_turbo": "zimage",
    "image_z_image": "zimage",
    "image_z_image_turbo_int8": "zimage",
    "image_z_image_int8": "zimage",
    "image_flux2": "flux2_dev",
    "image_flux2_fp8": "flux2_dev",
    "image_flux2_klein_text_to_image": "flux2_klein",
    "image_flux2_klein_image_edit_4b_distilled": "flux2_klein",
    "image_flux2_klein_image_edit_9b_base": "flux2_klein",
    "image_qwen_Image_2512": "qwenimage",
    "image_qwen_image": "qwenimage",
    "image_qwen_image_edit": "qwenimage_edit",
    "image_qwen_image_edit_2509": "qwenimage_edit",
    "image_qwen_image_edit_2511": "qwenimage_edit",
    "image_qwen_image_edit_2511_int8": "qwenimage_edit",
    "image_firered_image_edit1_1": "qwenimage_edit",
    "image_krea2_turbo_t2i": "krea2",
    "image_krea2_turbo_int8_image_style_reference": "krea2",
    "flux_dev_full_text_to_image": "flux",
    "flux_schnell_full_text_to_image": "flux",
    "flux_kontext_dev_basic": "flux",
}


def _import(name: str, registry):
    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    return import_comfy_data(data, registry, name, title=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAMILY_OF))
def test_template_imports_and_checks_clean_in_its_family(name: str, registry) -> None:
    result = _import(name, registry)
    assert result.unsupported == []
    assert result.families == []
    assert check_comfy(result, registry, name) == []
    loaders = [
        n for n in result.workflow["nodes"].values() if n["type"] in ("LoadDenoiser", "LoadTextEncoder")
    ]
    loaders += [n for n in result.workflow["nodes"].values() if n["type"] == "LoadVAE"]
    assert len(loaders) >= 3
    assert {n["params"]["family"] for n in loaders} <= {
        FAMILY_OF[name],
        *_SAME_FILES.get(FAMILY_OF[name], ()),
    }


# FLUX.2's text encoder loader says [klein] for a Mistral file that loads as [dev] (comfy_layouts.loaders
# tells by the file), and its VAE is the same file for both.
_SAME_FILES = {"flux2_dev": ("flux2_klein",)}


def test_z_image_reads_its_promoted_file_names_and_ae_as_its_own_vae(registry) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    nodes = _import("image_z_image_turbo", registry).workflow["nodes"]
    # The subgraph instance promotes these widgets with no value of its own: the inner nodes' values run.
    assert nodes["load_unet"]["params"]["path"] == "z_image_turbo_bf16.safetensors"
    assert nodes["load_clip"]["params"]["path"] == "qwen_3_4b.safetensors"
    assert nodes["load_vae"]["params"] == {"path": "ae.safetensors", "family": "zimage"}
    assert nodes["ksampler"]["params"]["steps"] == 8
    assert nodes["text_encode"]["params"]["text"].startswith("Latina female")


def test_qwen_edit_plus_prompts_read_the_pictures_through_the_edit_encoder(registry) -> None:
    pytest.importorskip(
        "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
    )
    nodes = _import("image_qwen_image_edit_2511", registry).workflow["nodes"]
    prompts = {k: n for k, n in nodes.items() if n["type"] == "TextEncodeQwenImageEditPlus"}
    assert len(prompts) == 2  # positive and negative, each with both pictures and the VAE
    for prompt in prompts.values():
        assert {"text_encoder", "vae", "image1", "image2"} <= set(prompt["inputs"])
        assert nodes[prompt["inputs"]["text_encoder"][0]]["params"]["family"] == "qwenimage_edit"
        picture = nodes[prompt["inputs"]["image1"][0]]
        assert picture["type"] == "FluxKontextImageScale"
    texts = sorted(p["params"].get("prompt", "") for p in prompts.values())
    assert texts[1].startswith("Change the furniture leather")


@pytest.mark.parametrize(
    ("height", "width", "expected"),
    [
        (1024, 1024, (1024, 1024)),
        (1500, 1000, (1248, 832)),  # 2:3 -> 832 x 1248 (ratio 0.667 exactly)
        (100, 1000, (672, 1568)),  # past the widest: the widest, 7:3
        (480, 640, (880, 1184)),  # 4:3 = 1.333 -> 1184 / 880 = 1.345, the nearest
    ],
)
def test_kontext_size_is_the_nearest_aspect_ratio_of_comfyuis_list(height: int, width: int, expected) -> None:
    assert kontext_size(height, width) == expected
