"""Imported ComfyUI nodes get readable ids (`ksampler`, `vae_decode`, `load_checkpoint`, `ksampler_2`) with
ComfyUI's kept in `meta.comfyui.ids`; messages name the readable id and `app export-comfy` writes ComfyUI's
ids back."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import main
from nodes.comfy.readable_ids import readable_id
from nodes.comfy.sources import check_comfy, import_comfy_data

DATA = Path(__file__).resolve().parent / "data" / "comfy"


def test_an_import_names_nodes_by_what_they_are_and_keeps_comfyuis_ids(registry) -> None:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["10"] = json.loads(json.dumps(prompt["3"]))  # a second KSampler
    prompt["10"]["inputs"]["latent_image"] = ["3", 0]
    result = import_comfy_data(prompt, registry, "sd15.json", title="sd15")
    wf = result.workflow
    assert set(wf["nodes"]) == {
        "load_checkpoint",
        "text_encode",
        "text_encode_2",
        "empty_latent_image",
        "ksampler",
        "ksampler_2",
        "vae_decode",
        "save_image",
    }
    assert wf["meta"]["comfyui"]["ids"] == {
        "ksampler": "3",
        "load_checkpoint": "4",
        "empty_latent_image": "5",
        "text_encode": "6",
        "text_encode_2": "7",
        "vae_decode": "8",
        "save_image": "9",
        "ksampler_2": "10",
    }
    # Wires name the readable ids too.
    assert wf["nodes"]["ksampler_2"]["inputs"]["latent"] == ["ksampler", "latent"]
    assert wf["nodes"]["vae_decode"]["inputs"]["vae"] == ["load_checkpoint", "vae"]


def test_problems_name_the_readable_id(registry) -> None:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["20"] = {"class_type": "SomeCustomNode", "inputs": {}}
    result = import_comfy_data(prompt, registry, "x.json", title="x")
    assert [u.node for u in result.unsupported] == ["some_custom_node"]
    problems = [str(p) for p in check_comfy(result, registry, "x.json")]
    assert any("node 'some_custom_node', field 'type': SomeCustomNode" in p for p in problems), problems


def test_ids_are_plain_words_whatever_the_class_is_called() -> None:
    assert readable_id("VAEDecode") == "vae_decode"
    assert readable_id("CheckpointLoaderSimple") == "load_checkpoint"
    assert readable_id("EmptySD3LatentImage") == "empty_sd3_latent_image"
    assert readable_id("ControlNetApplyAdvanced") == "controlnet_apply_advanced"
    assert readable_id("Video Slice") == "video_slice"  # custom classes have spaces
    assert readable_id("3DLoader") == "node_3_d_loader"  # an id never starts with a digit
    assert readable_id("日本") == "node"


def test_a_class_whose_name_is_a_numbered_id_does_not_take_anothers_id(registry) -> None:
    prompt = {
        "1": {"class_type": "KSampler", "inputs": {}},
        "2": {"class_type": "Ksampler_2", "inputs": {}},  # snake-cases to "ksampler_2"
        "3": {"class_type": "KSampler", "inputs": {}},
    }
    ids = import_comfy_data(prompt, registry, "x.json", title="x").workflow["meta"]["comfyui"]["ids"]
    assert len(set(ids)) == 3 and sorted(ids.values()) == ["1", "2", "3"]
    assert ids["ksampler"] == "1"


def test_export_of_an_import_writes_comfyuis_ids_and_numbers_new_nodes_past_them(tmp_path: Path) -> None:
    source = DATA / "sd15_default.api.json"
    imported, exported = tmp_path / "wf.json", tmp_path / "api.json"
    assert main(["import", str(source), "-o", str(imported)]) == 0
    data = json.loads(imported.read_text())
    # A node added in Nodeloom (no ComfyUI id): numbered, never reusing one of the import's ids.
    data["nodes"]["preview"] = {
        "type": "PreviewImage",
        "params": {},
        "inputs": {"image": ["vae_decode", "image"]},
    }
    imported.write_text(json.dumps(data))
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    prompt = json.loads(exported.read_text())
    original = json.loads(source.read_text())
    assert set(prompt) == set(original) | {"1"}
    assert prompt["1"]["class_type"] == "PreviewImage" and prompt["1"]["inputs"]["images"] == ["8", 0]
    assert prompt["3"]["_meta"]["title"] == "ksampler"
