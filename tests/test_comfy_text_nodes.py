"""ComfyUI's TextGenerate runs on our LLM Generate (with a Load LLM of the text encoder's file), and its
StringConcatenate / StringReplace on our Join Text / Replace Text; all export back; ComfyUI's family ids
that Nodeloom names otherwise (qwen_image, flux2) are translated by the family check."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import main
from nodes.comfy.family_check import family_problems
from nodes.comfy.mapping_text import textgen_widgets
from nodes.comfy.sources import check_comfy, import_comfy_data, load_comfy_graph

QWEN3 = "qwen_3_4b.safetensors"


def _textgen_api() -> dict:
    return {
        "1": {"class_type": "CLIPLoader", "inputs": {"clip_name": QWEN3, "type": "stable_diffusion"}},
        "2": {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "a haiku about"}},
        "3": {
            "class_type": "StringConcatenate",
            "inputs": {"string_a": ["2", 0], "string_b": "rain", "delimiter": " "},
        },
        "4": {
            "class_type": "TextGenerate",
            "inputs": {
                "clip": ["1", 0],
                "prompt": ["3", 0],
                "max_length": 300,
                "sampling_mode": "on",
                "sampling_mode.temperature": 0.6,
                "sampling_mode.top_k": 40,
                "sampling_mode.top_p": 0.9,
                "sampling_mode.min_p": 0.05,
                "sampling_mode.repetition_penalty": 1.1,
                "sampling_mode.seed": 7,
                "thinking": False,
                "use_default_template": True,
            },
        },
        "5": {
            "class_type": "StringReplace",
            "inputs": {"string": ["4", 0], "find": "rain", "replace": "snow"},
        },
        "6": {"class_type": "PreviewAny", "inputs": {"source": ["5", 0]}},
    }


def test_text_generate_is_llm_generate_on_a_load_llm_of_the_text_encoder(registry) -> None:
    result = import_comfy_data(_textgen_api(), registry, "tg.json", title="tg")
    assert result.unsupported == []
    nodes = result.workflow["nodes"]
    assert nodes["text_generate"] == {
        "type": "LLMGenerate",
        "params": {
            "max_new_tokens": 300,
            "sampling": "sample",
            "chat": True,
            "temperature": 0.6,
            "top_k": 40,
            "top_p": 0.9,
            "repetition_penalty": 1.1,
            "seed": 7,
            "min_p": 0.05,  # applied as transformers' MinPLogitsWarper (pipelines/llm/sampling.py)
        },
        "inputs": {"prompt": ["string_concatenate", "text"], "llm": ["load_clip_llm", "llm"]},
    }
    assert nodes["load_clip_llm"] == {"type": "LoadLLM", "params": {"path": QWEN3}, "inputs": {}}
    assert nodes["string_concatenate"] == {
        "type": "StringConcatenate",
        "params": {"string_b": "rain", "delimiter": " "},
        "inputs": {"string_a": ["primitive_string_multiline", "text"]},
    }
    assert nodes["string_replace"]["params"] == {"find": "rain", "replace": "snow"}
    notes = [str(n) for n in result.notes]
    assert not any("min_p" in n for n in notes), notes
    assert any("Load LLM 'load_clip_llm'" in n and "read as its LLM" in n for n in notes), notes
    # The LLM's file name came from the ComfyUI file: confined to the models folders like the loader's.
    assert result.workflow["meta"]["comfyui"]["names"]["load_clip_llm"] == {"path": QWEN3}
    problems = [str(p) for p in check_comfy(result, registry, "tg.json")]
    assert not [p for p in problems if "not connected" in p or "type" in p.split(":")[1]], problems


def test_a_ui_text_generate_reads_its_dynamic_widgets() -> None:
    on = ["tell me", 256, "on", 0.7, 64, 0.95, 0.05, 1.05, 3, "randomize", 0, False, True]
    assert textgen_widgets(on) == {
        "prompt": "tell me",
        "max_length": 256,
        "sampling_mode": "on",
        "sampling_mode.temperature": 0.7,
        "sampling_mode.top_k": 64,
        "sampling_mode.top_p": 0.95,
        "sampling_mode.min_p": 0.05,
        "sampling_mode.repetition_penalty": 1.05,
        "sampling_mode.seed": 3,
        "sampling_mode.presence_penalty": 0,
        "thinking": False,
        "use_default_template": True,
    }
    assert textgen_widgets(["x", 99, "off", True, False]) == {
        "prompt": "x",
        "max_length": 99,
        "sampling_mode": "off",
        "thinking": True,
        "use_default_template": False,
    }


def test_text_nodes_run_as_comfyuis(registry) -> None:
    join = registry["StringConcatenate"].run(None, string_a="a", string_b="b", delimiter=", ")["text"]
    assert join == "a, b"
    replace = registry["StringReplace"].run
    assert replace(None, string="rain, rain", find="rain", replace="snow")["text"] == "snow, snow"
    assert replace(None, string="ab", find="", replace="-")["text"] == "-a-b-"  # Python's (and ComfyUI's)


def test_text_nodes_export_back_to_the_comfyui_prompt(tmp_path: Path) -> None:
    original = _textgen_api()
    source, imported, exported = tmp_path / "tg.json", tmp_path / "wf.json", tmp_path / "api.json"
    source.write_text(json.dumps(original))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    prompt = json.loads(exported.read_text())
    # The Load LLM folds back into the CLIP loader it was made from: the same six nodes, same ids.
    assert {nid: n["class_type"] for nid, n in prompt.items()} == {
        nid: n["class_type"] for nid, n in original.items()
    }
    generate = prompt["4"]["inputs"]
    assert generate["clip"] == ["1", 0] and generate["prompt"] == ["3", 0]
    assert generate["max_length"] == 300 and generate["sampling_mode"] == "on"
    assert generate["sampling_mode.temperature"] == 0.6 and generate["sampling_mode.seed"] == 7
    assert prompt["3"]["inputs"] == {"string_a": ["2", 0], "string_b": "rain", "delimiter": " "}
    assert prompt["5"]["inputs"] == {"string": ["4", 0], "find": "rain", "replace": "snow"}


def test_comfyuis_family_ids_are_translated_to_ours() -> None:
    def families(graph: dict) -> set[str]:
        return {p.family for p in family_problems(load_comfy_graph(graph, "x.json"))}

    qwen = {
        "1": {
            "class_type": "CLIPLoader",
            "inputs": {"clip_name": "qwen_2.5_vl_7b.safetensors", "type": "qwen_image"},
        }
    }
    qwen["2"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "qwen_image_fp8_e4m3fn.safetensors"}}
    assert families(qwen) == set()  # Nodeloom's qwenimage
    klein = {
        "1": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen_3_4b.safetensors", "type": "flux2"}},
        "2": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux-2-klein-4b.safetensors"}},
    }
    assert families(klein) == set()
    other = {"1": {"class_type": "CLIPLoader", "inputs": {"clip_name": "x.safetensors", "type": "ltxv"}}}
    assert families(other) == {"ltxv"}  # a family that does not run here is still reported


def test_the_llm_file_named_by_a_comfyui_file_stays_inside_the_models_folders(tmp_path: Path, capsys) -> None:
    graph = _textgen_api()
    graph["1"]["inputs"]["clip_name"] = "../../private/model.safetensors"
    source = tmp_path / "tg.json"
    source.write_text(json.dumps(graph))
    assert main(["check", str(source)]) == 2
    err = capsys.readouterr().err
    assert "node 'load_clip_llm', field 'path': '../../private/model.safetensors' climbs out" in err, err
