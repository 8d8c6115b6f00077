"""ComfyUI import: hand-written API and UI files covering every mapped node, muted/bypassed nodes, reroutes,
primitives, a subgraph, converted widgets and drifting widget counts, and PNGs written the way ComfyUI's
SaveImage writes them; plus `app import` / `app check` / `app --run` on the results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from app.main import main
from nodes.comfy.api_format import ComfyFormatError
from nodes.comfy.sources import check_comfy, import_comfy
from nodes.workflow import workflow_from_dict
from tests.comfy_ids import by_comfy_id

DATA = Path(__file__).resolve().parent / "data" / "comfy"


def _notes(result) -> list[str]:
    return [str(n) for n in result.notes]


def test_api_file_maps_every_node_to_its_nodeloom_type(registry) -> None:
    result = import_comfy(DATA / "api_every_node.json", registry)
    nodes = by_comfy_id(result.workflow)  # the assertions below name the file's ComfyUI ids
    types = {nid: n["type"] for nid, n in nodes.items()}
    assert types == {
        "1": "LoadDiffusionModel",
        "2": "LoadDenoiser",
        "3": "LoadTextEncoder",
        "4": "LoadTextEncoder",
        "5": "LoadTextEncoder",
        "6": "LoadVAE",
        "8": "TextEncode",
        "9": "TextEncode",
        "10": "TextEncode",
        "11": "ZeroConditioning",
        "16": "EmptyLatent",
        "17": "EmptyLatent",
        "18": "Sampler",
        "19": "SamplerAdvanced",
        "20": "VAEDecode",
        "21": "VAEEncode",
        "22": "LoadImage",
        "23": "SaveImage",
        "24": "ImageScale",
        "25": "ImageScaleBy",
        "26": "PreviewImage",
        "27": "LatentUpscale",
        "28": "LatentUpscaleBy",
        "7": "ClipSkip",
        "29": "LoadLoRA",
        "30": "LoadLoRA",
        "31": "LoadControlNet",
        "32": "ApplyControlNet",
        "33": "ApplyControlNet",
        "34": "LoadUpscaleModel",
        "35": "Sampler",
        "36": "ComfyUI.StyleModelLoader",
        "37": "UpscaleImage",
        "38": "SetLatentNoiseMask",
        "39": "InpaintConditioning",
        "13": "ModelSamplingShift",
        "14": "ModelSamplingShift",
        "15": "ModelSamplingShift",
    }
    # FluxGuidance is wired around (its value goes to the sampler's cfg); ModelSampling* are applied.
    assert "12" not in nodes
    assert nodes["13"]["params"] == {"mode": "sd3", "shift": 3.0}
    assert nodes["14"]["params"]["mode"] == "flux" and nodes["14"]["inputs"] == {
        "denoiser": ["2", "denoiser"]
    }
    assert nodes["18"]["params"] == {
        "scheduler": "k_dpmpp_2m",
        "sigma_schedule": "karras",
        "steps": 20,
        "cfg": 7.5,
        "seed": 42,
        "denoise": 1.0,
    }
    assert nodes["18"]["inputs"] == {
        "denoiser": ["13", "denoiser"],  # ModelSamplingSD3, applied
        "positive": ["8", "conditioning"],
        "negative": ["11", "conditioning"],
        "latent": ["17", "latent"],
    }
    # CLIPSetLastLayer is our ClipSkip, with ComfyUI's value as it is (-2: the penultimate layer).
    assert nodes["7"] == {
        "type": "ClipSkip",
        "params": {"clip_skip": -2},
        "inputs": {"text_encoder": ["1", "text_encoder"]},
    }
    assert nodes["8"]["params"] == {"text": "a red fox"}
    assert nodes["8"]["inputs"]["text_encoder"] == ["7", "text_encoder"]
    # Split loaders: ComfyUI's CLIP loader type is our family, weight_dtype our dtype choice.
    assert nodes["2"]["params"] == {"path": "flux1-dev.safetensors", "family": "flux", "dtype": "fp8_e4m3fn"}
    assert nodes["3"]["params"] == {"path": "t5xxl_fp16.safetensors", "family": "sd3"}
    assert nodes["4"]["params"] == {
        "path": "clip_l.safetensors",
        "path_2": "t5xxl_fp16.safetensors",
        "family": "flux",
    }
    assert nodes["5"]["params"] == {
        "path": "clip_l.safetensors",
        "path_2": "clip_g.safetensors",
        "path_3": "t5xxl_fp16.safetensors",
        "family": "sd3",
    }
    assert nodes["29"] == {
        "type": "LoadLoRA",
        "params": {"path": "detail.safetensors", "strength_model": 0.8, "strength_text": 0.6},
        "inputs": {"denoiser": ["1", "denoiser"], "text_encoder": ["1", "text_encoder"]},
    }
    assert nodes["30"] == {
        "type": "LoadLoRA",
        "params": {"path": "style.safetensors", "strength_model": 1.0},
        "inputs": {"denoiser": ["29", "denoiser"]},
    }
    assert nodes["31"]["params"] == {"path": "canny.safetensors"}
    assert nodes["32"] == {
        "type": "ApplyControlNet",
        "params": {"strength": 0.9, "start_percent": 0.0, "end_percent": 1.0},
        "inputs": {
            "positive": ["8", "conditioning"],
            "controlnet": ["31", "controlnet"],
            "image": ["22", "image"],
        },
    }
    assert nodes["33"]["params"] == {"strength": 1.0, "start_percent": 0.0, "end_percent": 0.8}
    assert nodes["33"]["inputs"]["negative"] == ["9", "conditioning"]
    assert nodes["37"]["inputs"] == {"upscale_model": ["34", "upscale_model"], "image": ["20", "image"]}
    # LoadImage's second output is its mask.
    assert nodes["38"]["inputs"] == {"latent": ["21", "latent"], "mask": ["22", "mask"]}
    assert nodes["39"] == {
        "type": "InpaintConditioning",
        "params": {"noise_mask": False},
        "inputs": {
            "positive": ["8", "conditioning"],
            "negative": ["9", "conditioning"],
            "vae": ["6", "vae"],
            "image": ["24", "image"],
            "mask": ["22", "mask"],
        },
    }
    # FluxGuidance 2.5 reaches both samplers it feeds as their cfg.
    assert nodes["19"]["params"]["cfg"] == 2.5 and nodes["35"]["params"]["cfg"] == 2.5
    assert nodes["19"]["params"] | {} == {
        "add_noise": True,
        "seed": 7,
        "steps": 30,
        "cfg": 2.5,
        "scheduler": "k_euler",
        "sigma_schedule": "simple",
        "start_step": 0,
        "end_step": 20,
        "leftover_noise": True,
    }
    assert nodes["35"]["params"]["scheduler"] == "k_dpmpp_2m_sde"
    # An empty latent learns its channels from the model its sampler uses.
    assert nodes["17"]["inputs"] == {"denoiser": ["13", "denoiser"]}  # the shifted model: the same weights
    assert nodes["10"]["params"]["text"] == "a red fox in snow"
    assert nodes["23"]["params"]["prefix"] == "flux_date_fox"
    assert nodes["2"]["params"]["family"] == "flux"  # from the file name
    notes = "\n".join(_notes(result))
    assert "not applied" not in notes  # ModelSamplingAuraFlow's shift 2.0 is
    assert (
        "node ksampler_2 (KSampler): approximated: sampler 'dpmpp_2m_sde_gpu' runs as 'dpmpp_2m_sde'" in notes
    )
    assert "weight_dtype" not in notes  # fp8_e4m3fn is one of our dtypes
    assert (
        "node load_controlnet (ControlNetLoader): ControlNet 'canny.safetensors': Nodeloom loads diffusers-format"
        in notes
    )
    # Only the class with no Nodeloom counterpart is refused.
    unsupported = {u.node: (u.class_type, u.reason) for u in result.unsupported}
    assert list(unsupported) == ["style_model_loader"]  # readable ids in the report
    assert unsupported["style_model_loader"][0] == "StyleModelLoader"


def test_unet_weight_dtype_and_clip_types_map_to_our_choices(registry, tmp_path: Path) -> None:
    prompt = {
        "1": {
            "class_type": "UNETLoader",
            "inputs": {"unet_name": "a.safetensors", "weight_dtype": "default"},
        },
        "2": {
            "class_type": "UNETLoader",
            "inputs": {"unet_name": "b.safetensors", "weight_dtype": "fp8_e5m2"},
        },
        "3": {
            "class_type": "UNETLoader",
            "inputs": {"unet_name": "c.safetensors", "weight_dtype": "fp8_e4m3fn_fast"},
        },
        "4": {
            "class_type": "CLIPLoader",
            "inputs": {"clip_name": "l.safetensors", "type": "stable_diffusion"},
        },
        "5": {
            "class_type": "DualCLIPLoader",
            "inputs": {"clip_name1": "l", "clip_name2": "g", "type": "sdxl"},
        },
        "6": {"class_type": "CLIPLoader", "inputs": {"clip_name": "x.safetensors", "type": "hunyuan_video"}},
    }
    path = tmp_path / "loaders.json"
    path.write_text(json.dumps(prompt))
    result = import_comfy(path, registry)
    nodes = by_comfy_id(result.workflow)
    assert [nodes[n]["params"]["dtype"] for n in "123"] == ["auto", "fp8_e5m2", "fp8_e4m3fn"]
    assert [nodes[n]["params"]["family"] for n in "456"] == ["sd", "sdxl", "auto"]
    notes = "\n".join(_notes(result))
    assert (
        "node load_unet_3 (UNETLoader): weight_dtype 'fp8_e4m3fn_fast' loads as dtype 'fp8_e4m3fn'" in notes
    )
    assert "node load_clip_3 (CLIPLoader): type 'hunyuan_video' is not a family Nodeloom runs" in notes
    assert result.unsupported == []


def test_ui_file_resolves_reroutes_primitives_bypass_mute_and_subgraphs(registry) -> None:
    result = import_comfy(DATA / "ui_features.json", registry)
    readable = set(result.workflow["nodes"])
    assert readable == {
        "load_checkpoint",
        "text_encode",
        "text_encode_2",
        "empty_latent_image",
        "ksampler",
        "vae_decode",
        "save_image",
        "load_clip",
    }
    nodes = by_comfy_id(result.workflow)  # the assertions below name the file's ComfyUI ids
    assert set(nodes) == {"1", "2", "3", "4", "5", "50:1", "6", "8"}
    sampler = nodes["5"]
    assert sampler["inputs"]["positive"] == ["2", "conditioning"]  # through the reroute
    assert sampler["inputs"]["negative"] == ["3", "conditioning"]  # around the bypassed ZeroOut
    # widgets by name: seed from the primitive (a converted widget), control_after_generate skipped
    assert sampler["params"] == {
        "scheduler": "k_euler_ancestral",
        "sigma_schedule": "karras",
        "steps": 25,
        "cfg": 6.5,
        "seed": 777,
        "denoise": 1.0,  # missing from the file: KSampler's default
    }
    # The subgraph's VAEDecode is wired to the outer checkpoint and sampler; SaveImage reads its output.
    assert nodes["50:1"] == {
        "type": "VAEDecode",
        "params": {},
        "inputs": {"vae": ["1", "vae"], "latent": ["5", "latent"]},
    }
    assert nodes["6"]["inputs"]["image"] == ["50:1", "image"]
    notes = "\n".join(_notes(result))
    assert "node 7 (SaveImage): muted in ComfyUI (mode 2): not imported" in notes
    assert "node 30 (ConditioningZeroOut): bypassed in ComfyUI (mode 4)" in notes
    assert "node ksampler (KSampler): no stored value for denoise (defaults used)" in notes
    assert "node load_clip (CLIPLoader): 1 extra widget value(s) ignored: ['a-future-widget']" in notes
    assert "subgraph 'Decode' expanded in place" in notes
    # Missing trailing values take the defaults when the workflow is validated.
    wf = workflow_from_dict(
        {**result.workflow, "nodes": {k: v for k, v in result.workflow["nodes"].items() if k != "load_clip"}},
        registry,
    )
    assert wf.nodes["ksampler"].params["denoise"] == 1.0
    ui = result.workflow["ui"]
    assert ui["nodes"]["load_checkpoint"] == {
        "pos": [10.0, 20.0],
        "size": [315.0, 98.0],
        "title": "My checkpoint",
    }
    assert ui["nodes"]["text_encode"]["color"] == "#232"
    assert ui["groups"] == [{"title": "Model", "rect": [-20.0, -20.0, 380.0, 200.0], "color": "#3f789e"}]
    assert ui["notes"] == [{"text": "# Cats\nA test workflow.", "title": "Readme", "pos": [10.0, -300.0]}]


def _comfy_png(path: Path, prompt: dict | None, workflow: dict | None) -> Path:
    """A PNG with the text chunks ComfyUI's SaveImage writes: `prompt` (API) and `workflow` (UI)."""
    info = PngImagePlugin.PngInfo()
    if prompt is not None:
        info.add_text("prompt", json.dumps(prompt))
    if workflow is not None:
        info.add_text("workflow", json.dumps(workflow))
    Image.new("RGB", (8, 8), (200, 30, 30)).save(path, pnginfo=info)
    return path


def test_comfy_png_prefers_the_ui_workflow_and_falls_back_to_the_prompt(registry, tmp_path: Path) -> None:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    workflow = json.loads((DATA / "real" / "sd15_default.json").read_text())
    both = import_comfy(_comfy_png(tmp_path / "both.png", prompt, workflow), registry)
    assert both.workflow["meta"]["comfyui"]["source_format"] == "ui"
    assert both.workflow["ui"]["nodes"]["ksampler"]["pos"] == [920.0, 170.0]
    only_prompt = import_comfy(_comfy_png(tmp_path / "prompt.png", prompt, None), registry)
    assert only_prompt.workflow["meta"]["comfyui"]["source_format"] == "api"
    # Both give the same graph.
    assert only_prompt.workflow["nodes"] == both.workflow["nodes"]
    with pytest.raises(ComfyFormatError, match="no ComfyUI 'workflow' or 'prompt' text chunk"):
        import_comfy(_comfy_png(tmp_path / "none.png", None, None), registry)


def test_check_lists_unsupported_nodes_and_exits_2(capsys) -> None:
    assert main(["check", str(DATA / "api_every_node.json")]) == 2
    err = capsys.readouterr().err
    assert "1 problem in the workflow" in err
    assert "node 'style_model_loader', field 'type': StyleModelLoader: no Nodeloom node" in err


def test_import_always_writes_the_file_and_a_run_of_it_is_refused_with_the_list(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "imported.json"
    assert main(["import", str(DATA / "api_every_node.json"), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["nodes"]["style_model_loader"]["type"] == "ComfyUI.StyleModelLoader"
    captured = capsys.readouterr()
    assert "unsupported: node style_model_loader (StyleModelLoader)" in captured.err
    assert "1 unsupported node(s): it will not run here" in captured.out
    assert main(["--run", str(out), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "node 'style_model_loader', field 'type': StyleModelLoader: no Nodeloom node" in err
    assert not (tmp_path / "o").exists()


def test_import_refuses_files_that_are_not_comfy_workflows(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert main(["import", str(bad), "-o", str(tmp_path / "x.json")]) == 2
    assert "not a ComfyUI workflow" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert main(["check", str(broken)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_check_of_a_valid_import_names_the_problem_fields(registry) -> None:
    result = import_comfy(DATA / "ui_features.json", registry)
    problems = [str(p) for p in check_comfy(result, registry, "ui_features.json")]
    assert problems == []
    # The CLIPLoader is our LoadTextEncoder now.
    assert result.workflow["nodes"]["load_clip"]["type"] == "LoadTextEncoder"


def test_the_editors_file_import_opens_a_comfy_file(registry) -> None:
    from app.importing import import_file

    real = Path(__file__).parent / "data" / "comfy" / "real" / "sd15_default.json"
    wf = import_file(real, registry)
    assert {node.type for node in wf.nodes.values()} >= {
        "LoadDiffusionModel",
        "TextEncode",
        "Sampler",
        "VAEDecode",
    }
