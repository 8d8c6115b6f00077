"""ComfyUI's Qwen-Image 2.1 templates (t2i, image edit, and their Turbo forms) import onto Nodeloom's nodes and
check clean, with the 2.1 family detected (not Qwen-Image's); small hand-made graphs for the mapping's edges.

The templates are ComfyUI's published ones (the `comfyui-workflow-templates-json` package; skipped without it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodes.comfy.sources import check_comfy, import_comfy_data

TEMPLATES = (
    "image_qwen_image_2_1_image_edit",
    "image_qwen_image_2_1_t2i",
    "image_qwen_image_2_1_turbo_image_edit",
    "image_qwen_image_2_1_turbo_t2i",
)
TURBO_GRID = "1.0, 0.978453, 0.95418, 0.926626, 0.89508, 0.845148, 0.704534, 0.414568, 0"


def template(name: str) -> Any:
    pytest.importorskip("comfyui_workflow_templates_json")
    from benchmarks.comfy_templates import templates_folder

    return json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))


def nodes_of(workflow: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [n for n in workflow["nodes"].values() if n["type"] == type_]


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_templates_import_and_check_clean(name: str, registry) -> None:
    result = import_comfy_data(template(name), registry, name, title=name)
    assert [u.class_type for u in result.unsupported] == []
    assert check_comfy(result, registry, name) == []
    workflow = result.workflow
    (encode,) = nodes_of(workflow, "TextEncodeQwenImage21")
    # The Qwen3-VL loader is 2.1's, though its CLIPLoader type says qwen_image.
    (loader,) = [n for n in nodes_of(workflow, "LoadTextEncoder") if "qwen3vl" in n["params"]["path"]]
    assert loader["params"]["family"] == "qwenimage21"
    assert nodes_of(workflow, "LoadDenoiser")[0]["params"]["family"] == "qwenimage21"
    assert not nodes_of(workflow, "ComfyUI.QwenImage21Cache")  # the cache switch passes the model through
    (sampler,) = nodes_of(workflow, "Sampler")
    assert sampler["inputs"]["positive"][1] == "positive" and sampler["inputs"]["negative"][1] == "negative"
    if "edit" in name:
        assert encode["inputs"]["image1"][0] == "load_image" and "vae" in encode["inputs"]
        # The template's switch picks the encoder's latent (the output size from the last picture).
        encode_id = next(k for k, n in workflow["nodes"].items() if n is encode)
        assert sampler["inputs"]["latent"] == [encode_id, "latent"]
    if "image_edit" in name and "turbo" not in name:
        assert encode["inputs"]["image2"][0] == "load_image_2"  # the second picture, in ComfyUI's order


@pytest.mark.parametrize("name", [t for t in TEMPLATES if "turbo" in t])
def test_turbo_manual_sigmas_fold_into_the_models_own_schedule(name: str, registry) -> None:
    """The Turbo templates' ManualSigmas is Turbo's shipped grid: the sampler runs scheduler "default" (the
    model's `sample_sigmas`, the same list) for its 8 steps, on the guider's model."""
    assert template(name) and TURBO_GRID  # the grid the templates hold (checked by the mapping itself)
    workflow = import_comfy_data(template(name), registry, name, title=name).workflow
    (sampler,) = nodes_of(workflow, "Sampler")
    assert sampler["params"]["scheduler"] == "default" and sampler["params"]["steps"] == 8
    assert sampler["inputs"]["denoiser"] == ["load_unet", "denoiser"]
    assert not [n for n in workflow["nodes"].values() if "Sigmas" in n["type"]]


def test_another_manual_sigma_list_takes_the_general_sigmas_path(registry) -> None:
    """A list that is not Turbo's shipped grid is a hand-given schedule like any other family's (the general
    ManualSigmas node on the Sampler's `sigmas` input), not folded into the model's own."""
    data = template("image_qwen_image_2_1_turbo_t2i")
    data = json.loads(json.dumps(data).replace(TURBO_GRID, "1.0, 0.7, 0.3, 0"))
    workflow = import_comfy_data(data, registry, "t", title="t").workflow
    (sigmas,) = nodes_of(workflow, "ManualSigmas")
    (sampler,) = nodes_of(workflow, "Sampler")
    assert sampler["inputs"]["sigmas"][1] == "sigmas" and sampler["params"]["scheduler"] != "default"


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_family_check_names_qwen_image_21(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 2.1 not runnable, the check would name it (UNETLoader's file name and the qwen_image CLIP type),
    never Qwen-Image, which runs."""
    from nodes.comfy import family_check
    from nodes.comfy.sources import load_comfy_graph

    graph = load_comfy_graph(template(name), name)

    def problems_of_the_run() -> list[family_check.FamilyProblem]:
        # The switched-off prompt enhancer's Qwen3.5 file counts only where the run reads it, which the import
        # says through `used`; on the raw graph it is set aside here.
        return [p for p in family_check.family_problems(graph) if p.family != "qwen3_5"]

    assert problems_of_the_run() == []
    without = {k: v for k, v in family_check.FAMILIES.items() if k != "qwenimage21"}
    monkeypatch.setattr(family_check, "FAMILIES", without)
    problems = problems_of_the_run()
    assert {p.class_type for p in problems} >= {"UNETLoader", "CLIPLoader"}
    assert {p.family for p in problems} == {"qwenimage21"}


def _graph(pictures: int, unet: str = "qwen_image_2.1_bf16.safetensors") -> dict[str, Any]:
    graph: dict[str, Any] = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": unet, "weight_dtype": "default"}},
        "2": {
            "class_type": "CLIPLoader",
            "inputs": {"clip_name": "qwen3vl_8b.safetensors", "type": "qwen_image"},
        },
        "3": {"class_type": "VAELoader", "inputs": {"vae_name": "qwen_image_2.1_vae.safetensors"}},
        "5": {
            "class_type": "TextEncodeQwenImage21",
            "inputs": {
                "clip": ["2", 0],
                "vae": ["3", 0],
                "prompt": "edit",
                "negative_prompt": "",
                "resolution": 512,
            },
        },
        "6": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["1", 0],
                "positive": ["5", 0],
                "negative": ["5", 1],
                "latent_image": ["5", 2],
                "seed": 1,
                "steps": 4,
                "cfg": 4.0,
                "sampler_name": "euler",
                "scheduler": "simple",
                "denoise": 1.0,
            },
        },
        "7": {"class_type": "VAEDecode", "inputs": {"samples": ["6", 0], "vae": ["3", 0]}},
        "8": {"class_type": "SaveImage", "inputs": {"filename_prefix": "out", "images": ["7", 0]}},
    }
    for i in range(pictures):
        graph[f"1{i}"] = {"class_type": "LoadImage", "inputs": {"image": f"p{i}.png"}}
        # Numbered out of order on purpose: the encoder takes them by their number, not the file's order.
        graph["5"]["inputs"][f"images.image_{pictures - i}"] = [f"1{i}", 0]
    return graph


def test_pictures_are_taken_in_their_number_order_and_params_copied(registry) -> None:
    workflow = import_comfy_data(_graph(3), registry, "t.json", title="t").workflow
    (encode,) = nodes_of(workflow, "TextEncodeQwenImage21")
    ids = workflow["meta"]["comfyui"]["ids"]
    assert [ids[encode["inputs"][f"image{i}"][0]] for i in (1, 2, 3)] == ["12", "11", "10"]
    assert encode["params"] == {"prompt": "edit", "negative_prompt": "", "resolution": 512}


def test_more_pictures_than_three_are_refused_with_the_reason(registry) -> None:
    result = import_comfy_data(_graph(4), registry, "t.json", title="t")
    (unsupported,) = result.unsupported
    assert unsupported.class_type == "TextEncodeQwenImage21" and "at most 3" in unsupported.reason


def test_a_qwen_image_graph_keeps_qwen_image_and_the_general_manual_sigmas(registry) -> None:
    """Outside a 2.1 graph the refinements do nothing: the CLIP type stays Qwen-Image, ManualSigmas general."""
    graph = _graph(0, unet="qwen_image_bf16.safetensors")
    graph["3"]["inputs"]["vae_name"] = "qwen_image_vae.safetensors"
    graph["5"] = {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["2", 0]}}
    graph["6"]["inputs"] |= {"negative": ["5", 0], "latent_image": ["9", 0]}
    graph["9"] = {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}}
    workflow = import_comfy_data(graph, registry, "t.json", title="t").workflow
    assert nodes_of(workflow, "LoadTextEncoder")[0]["params"]["family"] == "qwenimage"
    graph["20"] = {"class_type": "ManualSigmas", "inputs": {"sigmas": TURBO_GRID}}
    workflow = import_comfy_data(graph, registry, "t.json", title="t").workflow
    assert nodes_of(workflow, "ManualSigmas")  # the general node: no Turbo folding outside a 2.1 graph
