"""`app check FILE... --json` (many files, each problem with its kind) and model families Nodeloom cannot
run, found from a ComfyUI file without the model files (CLIP loader `type`, loader file names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.main import main
from nodes.comfy.family_check import family_of_name
from pipelines.diffusion.families import FAMILIES

# A plain SD1.5 txt2img in API format: every node mapped, names left for the models library to find.
SD15 = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
    "3": {
        "class_type": "KSampler",
        "inputs": {
            "seed": 1,
            "steps": 20,
            "cfg": 7.0,
            "sampler_name": "euler",
            "scheduler": "normal",
            "denoise": 1.0,
            "model": ["4", 0],
            "positive": ["6", 0],
            "negative": ["7", 0],
            "latent_image": ["5", 0],
        },
    },
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "out", "images": ["8", 0]}},
}


def _ltxv_graph() -> dict:
    """SD15's shape with LTX-Video's loaders (a family Nodeloom does not run): a CLIPLoader of type "ltxv"
    and an LTX UNet file, plus a node no Nodeloom node stands for."""
    graph = json.loads(json.dumps(SD15))
    del graph["4"]
    graph["1"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "ltx-video-2b-v0.9.5.safetensors"}}
    graph["2"] = {
        "class_type": "CLIPLoader",
        "inputs": {"clip_name": "t5xxl_fp16.safetensors", "type": "ltxv"},
    }
    graph["10"] = {"class_type": "VAELoader", "inputs": {"vae_name": "ltxv_vae.safetensors"}}
    graph["11"] = {"class_type": "LTXVImgToVideo", "inputs": {"width": 768}}
    for nid in ("6", "7"):
        graph[nid]["inputs"]["clip"] = ["2", 0]
    graph["3"]["inputs"]["model"] = ["1", 0]
    graph["8"]["inputs"]["vae"] = ["10", 0]
    return graph


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_check_json_reports_every_file_with_kinds_and_exits_2(tmp_path: Path, capsys) -> None:
    ok = _write(tmp_path, "sd15.json", SD15)
    ltxv = _write(tmp_path, "ltxv.json", _ltxv_graph())
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert main(["check", str(ok), str(ltxv), str(broken), "--json"]) == 2
    reports = json.loads(capsys.readouterr().out)
    assert [r["file"] for r in reports] == [str(ok), str(ltxv), str(broken)]
    assert [r["ok"] for r in reports] == [True, False, False]
    assert reports[0]["problems"] == []
    # No models folder in the test: the notes say the names were not looked up.
    assert any("model names not checked" in n for n in reports[0]["notes"])
    kinds = {(p["kind"], p["node"], p["field"]) for p in reports[1]["problems"]}
    assert ("unsupported-node", "ltxv_img_to_video", "type") in kinds
    assert ("unsupported-family", "load_clip", "type") in kinds
    assert ("unsupported-family", "load_unet", "unet_name") in kinds
    family = next(p for p in reports[1]["problems"] if p["node"] == "load_clip")
    assert "CLIPLoader" in family["message"] and "'ltxv'" in family["message"]
    assert reports[2]["problems"][0]["kind"] == "invalid"
    assert "not valid JSON" in reports[2]["problems"][0]["message"]


def test_check_json_of_good_files_exits_0(tmp_path: Path, capsys) -> None:
    files = [str(_write(tmp_path, f"sd15_{i}.json", SD15)) for i in range(3)]
    assert main(["check", *files, "--json"]) == 0
    assert all(r["ok"] for r in json.loads(capsys.readouterr().out))


def test_check_json_names_a_missing_model_and_how_to_add_a_folder(tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    (models / "checkpoints").mkdir(parents=True)
    ok = _write(tmp_path, "sd15.json", SD15)
    assert main(["check", str(ok), "--json", "--models-dir", str(models)]) == 2
    (report,) = json.loads(capsys.readouterr().out)
    missing = [p for p in report["problems"] if p["kind"] == "missing-model"]
    assert [(p["node"], p["field"]) for p in missing] == [("load_checkpoint", "path")]
    assert "v1-5-pruned-emaonly.safetensors" in missing[0]["message"]
    assert str(models / "checkpoints") in missing[0]["message"]  # the folders searched
    assert any("app models add-root DIR" in n for n in report["notes"])


def test_check_human_output_says_the_family_per_file(tmp_path: Path, capsys) -> None:
    ltxv = _write(tmp_path, "ltxv.json", _ltxv_graph())
    ok = _write(tmp_path, "sd15.json", SD15)
    assert main(["check", str(ltxv), str(ok)]) == 2
    captured = capsys.readouterr()
    assert f"{ok}: ok" in captured.out
    assert (
        "node 'load_clip', field 'type': CLIPLoader: model family 'ltxv' (from type 'ltxv')" in captured.err
    )


def test_family_names_prefer_the_more_specific_family() -> None:
    # "flux" is in "flux2": Flux 2 is another model, never taken for Flux 1.
    assert family_of_name("flux2_dev_fp8mixed.safetensors") == "flux2"
    assert family_of_name("flux1-dev.safetensors") == "flux"
    assert family_of_name("qwen_image_fp8_e4m3fn.safetensors") == "qwen_image"
    assert family_of_name("my_model.safetensors") is None


def test_a_family_in_the_registry_is_not_reported(tmp_path: Path, capsys) -> None:
    # Z-Image runs here; ComfyUI loads its text encoder with type "lumina2", told apart by the UNet name.
    assert "zimage" in FAMILIES
    graph = _ltxv_graph()
    del graph["11"]
    graph["1"]["inputs"]["unet_name"] = "z_image_turbo_bf16.safetensors"
    graph["2"]["inputs"]["type"] = "lumina2"
    graph["10"]["inputs"]["vae_name"] = "ae.safetensors"
    assert main(["check", str(_write(tmp_path, "z.json", graph)), "--json"]) == 0, capsys.readouterr()


def test_import_tells_everything_at_once(tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    (models / "checkpoints").mkdir(parents=True)
    graph = _ltxv_graph()
    graph["8"] = {
        "class_type": "VAEDecodeTiled",
        "inputs": {"tile_size": 512, "overlap": 64, "samples": ["3", 0], "vae": ["10", 0]},
    }
    source = _write(tmp_path, "ltxv.json", graph)
    out = tmp_path / "ltxv.nodeloom.json"
    assert main(["import", str(source), "-o", str(out), "--models-dir", str(models)]) == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "summary: 9 node(s) mapped (1 approximated), 1 unsupported, 2 model family problem(s)" in err
    assert "approximated: node vae_decode_tiled (VAEDecodeTiled)" in err
    assert "unsupported: node ltxv_img_to_video (LTXVImgToVideo)" in err
    assert "CLIPLoader: model family 'ltxv'" in err
    missing = [line for line in err.splitlines() if line.startswith("missing model: ")]
    assert {line.split(",")[0] for line in missing} == {
        "missing model: node load_unet",
        "missing model: node load_clip",
        "missing model: node load_vae",
    }
    assert all(str(models) in line for line in missing)  # the folders searched
    assert "`app models add-root DIR`" in err
    assert "3 model file problem(s)" in captured.out


def test_the_largest_gaps_say_why_they_are_not_mapped(tmp_path: Path, capsys) -> None:
    graph = json.loads(json.dumps(SD15))
    graph["20"] = {"class_type": "SplitSigmas", "inputs": {}}
    graph["21"] = {"class_type": "SomeCustomNode", "inputs": {}}
    assert main(["check", str(_write(tmp_path, "gaps.json", graph)), "--json"]) == 2
    (report,) = json.loads(capsys.readouterr().out)
    reasons = {p["node"]: p["message"] for p in report["problems"] if p["kind"] == "unsupported-node"}
    assert "splits a schedule between samplers" in reasons["split_sigmas"]  # what is missing here
    assert (
        "no Nodeloom node does what this ComfyUI node does" in reasons["some_custom_node"]
    )  # the generic reason


def test_a_controlnet_of_a_flow_family_is_refused_by_the_check_as_at_run(tmp_path, capsys) -> None:
    """The samplers apply ControlNets to SD 1.x and SDXL only (a Qwen-Image, SD 3.5 or FLUX.1 graph with one is
    refused at Run): `app check` names the ControlNet loader and its family instead of passing the file."""
    import json

    from app.main import main

    def graph(control_net: str) -> dict:
        return {
            "1": {"class_type": "ControlNetLoader", "inputs": {"control_net_name": control_net}},
            "2": {
                "class_type": "CheckpointLoaderSimple",
                "inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"},
            },
        }

    found = {}
    for name in ("sd3.5_large_controlnet_canny.safetensors", "control_v11p_sd15_canny.safetensors"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(graph(name)), encoding="utf-8")
        capsys.readouterr()
        main(["check", "--json", str(path)])
        found[name] = [
            p for p in json.loads(capsys.readouterr().out)[0]["problems"] if p["kind"] == "unsupported-family"
        ]
    [problem] = found["sd3.5_large_controlnet_canny.safetensors"]
    assert "ControlNet" in problem["message"] and "SD 1.x and SDXL" in problem["message"], problem
    assert found["control_v11p_sd15_canny.safetensors"] == []  # an SD 1.5 ControlNet still checks clean


@pytest.mark.parametrize(
    "template", ["llm_qwen3_5_text_gen", "image_flux3_klein_t2i", "image_flux3_klein_distilled_t2i"]
)
def test_templates_reading_qwen35_files_say_why_they_cannot_run(template: str, capsys) -> None:
    """Qwen3.5 LLM files (the text-generation template's, FLUX.3 [klein]'s prompt upsampler, on as shipped) are
    read by Load LLM, but no tokenizer of the released sizes ships here: the check says so before a Run would."""
    from tests.template_runs import template_file

    assert main(["check", str(template_file(template)), "--json"]) == 2
    (report,) = json.loads(capsys.readouterr().out)
    (problem,) = [p for p in report["problems"] if p["kind"] == "unsupported-family"]
    assert "'qwen3_5'" in problem["message"] and "no tokenizer" in problem["message"]


@pytest.mark.parametrize(
    ("template", "node_class", "family"),
    [
        ("image_netayume_lumina_t2i", "CheckpointLoaderSimple", "lumina2"),  # no "lumina" in its file name
        ("image_ming_image_01_design_t2i", "UNETLoader", "ming_image"),  # CLIP type "qwen_image"
        ("image_ernie_image", "UNETLoader", "ernie_image"),  # CLIP type "flux2"
    ],
)
def test_templates_of_families_not_run_here_are_refused_by_the_check(
    template: str, node_class: str, family: str, capsys
) -> None:
    """Each of these passed `app check` although its model does not run here (the family hid behind another
    family's CLIP type, or the file name did not say it)."""
    from tests.template_runs import template_file

    assert main(["check", str(template_file(template)), "--json"]) == 2
    (report,) = json.loads(capsys.readouterr().out)
    found = [p for p in report["problems"] if p["kind"] == "unsupported-family"]
    assert any(node_class in p["message"] and repr(family) in p["message"] for p in found), found
