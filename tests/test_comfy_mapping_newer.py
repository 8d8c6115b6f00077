"""ComfyUI's newer core nodes on small hand-made graphs: the custom-sampling family folded onto our Sampler,
a constant ComfySwitchNode, ResolutionSelector, ImageScaleToTotalPixels, the video nodes, VAEDecodeTiled,
PreviewAny and CFGNorm; and `app export-comfy` back to API format for the ones mapped."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from app.main import main
from nodes.comfy.api_format import is_api_format
from nodes.comfy.size_nodes import ImageScaleToTotalPixels, total_pixels_size
from nodes.comfy.sources import check_comfy, import_comfy_data
from tests.comfy_ids import by_comfy_id


def _import(graph: dict, registry):
    return import_comfy_data(graph, registry, "test.json", title="test")


def _base() -> dict:
    """Checkpoint, two prompts and an empty latent: what every sampler below reads."""
    return {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["13", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "out", "images": ["8", 0]}},
    }


def _custom_advanced(noise: dict, guider: dict, sigmas: dict | None = None) -> dict:
    graph = _base()
    graph |= {
        "20": noise,
        "21": guider,
        "22": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler_ancestral"}},
        "23": sigmas
        or {
            "class_type": "BasicScheduler",
            "inputs": {"scheduler": "karras", "steps": 12, "denoise": 0.75, "model": ["4", 0]},
        },
        "13": {
            "class_type": "SamplerCustomAdvanced",
            "inputs": {
                "noise": ["20", 0],
                "guider": ["21", 0],
                "sampler": ["22", 0],
                "sigmas": ["23", 0],
                "latent_image": ["5", 0],
            },
        },
    }
    return graph


def test_sampler_custom_advanced_with_cfg_guider_is_our_sampler(registry) -> None:
    graph = _custom_advanced(
        {"class_type": "RandomNoise", "inputs": {"noise_seed": 42}},
        {
            "class_type": "CFGGuider",
            "inputs": {"cfg": 5.5, "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0]},
        },
    )
    result = _import(graph, registry)
    assert result.unsupported == []
    nodes = by_comfy_id(result.workflow)
    # The parts fold into the sampler: no node of their own.
    assert not {"20", "21", "22", "23"} & set(nodes)
    sampler = nodes["13"]
    assert sampler["type"] == "Sampler"
    assert sampler["params"] == {
        "scheduler": "k_euler_ancestral",
        "sigma_schedule": "karras",
        "steps": 12,
        "cfg": 5.5,
        "seed": 42,
        "denoise": 0.75,
    }
    assert sampler["inputs"] == {
        "denoiser": ["4", "denoiser"],
        "positive": ["6", "conditioning"],
        "negative": ["7", "conditioning"],
        "latent": ["5", "latent"],
    }
    assert nodes["8"]["inputs"]["latent"] == ["13", "latent"]
    assert check_comfy(result, registry, "test.json") == []


def test_basic_guider_with_disabled_noise_is_the_advanced_sampler_without_noise(registry) -> None:
    graph = _custom_advanced(
        {"class_type": "DisableNoise", "inputs": {}},
        {"class_type": "BasicGuider", "inputs": {"model": ["4", 0], "conditioning": ["6", 0]}},
        {"class_type": "BasicScheduler", "inputs": {"scheduler": "simple", "steps": 4, "denoise": 1.0}},
    )
    result = _import(graph, registry)
    sampler = by_comfy_id(result.workflow)["13"]
    assert sampler["type"] == "SamplerAdvanced"
    assert sampler["params"]["add_noise"] is False
    assert sampler["params"]["cfg"] == 1.0  # BasicGuider: the conditional prediction alone
    assert "negative" not in sampler["inputs"]
    assert check_comfy(result, registry, "test.json") == []


def test_a_sampler_that_is_not_the_plain_case_is_refused_naming_the_part(registry) -> None:
    graph = _custom_advanced(
        {"class_type": "RandomNoise", "inputs": {"noise_seed": 1}},
        {"class_type": "BasicGuider", "inputs": {"model": ["4", 0], "conditioning": ["6", 0]}},
        {"class_type": "SplitSigmas", "inputs": {"step": 2}},
    )
    result = _import(graph, registry)
    problems = [str(p) for p in check_comfy(result, registry, "test.json")]
    assert any(
        "node 'sampler_custom_advanced', field 'type': SamplerCustomAdvanced: not mapped" in p
        and "SplitSigmas" in p
        for p in problems
    ), problems


def test_a_constant_switch_is_resolved_and_a_wired_one_refused(registry) -> None:
    graph = _base() | {
        "13": {
            "class_type": "KSampler",
            "inputs": {
                "seed": 1,
                "steps": 2,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
                "model": ["4", 0],
                "positive": ["30", 0],
                "negative": ["7", 0],
                "latent_image": ["5", 0],
            },
        },
        "30": {
            "class_type": "ComfySwitchNode",
            "inputs": {"switch": False, "on_false": ["6", 0], "on_true": ["7", 0]},
        },
    }
    result = _import(graph, registry)
    assert result.unsupported == []
    assert "30" not in by_comfy_id(result.workflow)
    assert by_comfy_id(result.workflow)["13"]["inputs"]["positive"] == ["6", "conditioning"]
    graph["30"]["inputs"]["switch"] = True
    assert by_comfy_id(_import(graph, registry).workflow)["13"]["inputs"]["positive"] == ["7", "conditioning"]
    # A PrimitiveBoolean is a constant too; a computed switch is not.
    graph["31"] = {"class_type": "PrimitiveBoolean", "inputs": {"value": True}}
    graph["30"]["inputs"]["switch"] = ["31", 0]
    assert by_comfy_id(_import(graph, registry).workflow)["13"]["inputs"]["positive"] == ["7", "conditioning"]
    graph["32"] = {
        "class_type": "ComfyMathExpression",
        "inputs": {"expression": "a > 2", "values.a": ["31", 0]},
    }
    graph["30"]["inputs"]["switch"] = ["32", 2]
    (refused,) = [u for u in _import(graph, registry).unsupported if u.node == "comfy_switch_node"]
    assert "switch is fed by a wire" in refused.reason


def test_resolution_selector_gives_its_consumers_width_and_height(registry) -> None:
    graph = _base()
    graph["40"] = {
        "class_type": "ResolutionSelector",
        "inputs": {"aspect_ratio": "16:9 (Widescreen)", "megapixels": 0.4, "multiple_of": 32},
    }
    graph["5"]["inputs"] |= {"width": ["40", 0], "height": ["40", 1]}
    result = _import(graph, registry)
    assert "40" not in by_comfy_id(result.workflow) and result.unsupported == []
    params = by_comfy_id(result.workflow)["5"]["params"]
    width, height = params["width"], params["height"]
    assert width % 32 == 0 and height % 32 == 0
    # Rounding each side to 32 moves the ratio and the area by at most about one step in 480 px.
    assert abs(width / height - 16 / 9) < 0.07
    assert abs(width * height / (0.4 * 2**20) - 1) < 0.1


def test_image_scale_to_total_pixels_keeps_the_ratio_at_the_pixel_count(registry) -> None:
    h, w = total_pixels_size(300, 600, 0.5, 16)
    assert h % 16 == 0 and w % 16 == 0 and w == 2 * h
    assert abs(h * w / (0.5 * 2**20) - 1) < 0.05  # rounding to 16 px on sides near 512/1024
    node = ImageScaleToTotalPixels(
        image=torch.rand(1, 30, 60, 3), method="bilinear", megapixels=0.01, resolution_steps=2
    )
    out = node.run(None)["image"]  # type: ignore[arg-type]  (the node reads nothing from its context)
    assert out.shape[0] == 1 and out.shape[3] == 3
    assert out.shape[2] == 2 * out.shape[1]
    graph = _base() | {
        "50": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
        "51": {
            "class_type": "ImageScaleToTotalPixels",
            "inputs": {
                "upscale_method": "lanczos",
                "megapixels": 1.0,
                "resolution_steps": 8,
                "image": ["50", 0],
            },
        },
    }
    node_json = by_comfy_id(_import(graph, registry).workflow)["51"]
    assert node_json["type"] == "ImageScaleToTotalPixels"
    assert node_json["params"] == {"method": "lanczos", "megapixels": 1.0, "resolution_steps": 8}


def _video_graph() -> dict:
    return {
        "1": {"class_type": "LoadVideo", "inputs": {"file": "clip.mp4"}},
        "2": {"class_type": "GetVideoComponents", "inputs": {"video": ["1", 0]}},
        "3": {
            "class_type": "ImageScaleBy",
            "inputs": {"upscale_method": "bilinear", "scale_by": 0.5, "image": ["2", 0]},
        },
        "4": {"class_type": "CreateVideo", "inputs": {"fps": 12.0, "images": ["3", 0], "audio": ["2", 1]}},
        "5": {
            "class_type": "SaveVideo",
            "inputs": {
                "filename_prefix": "video/ComfyUI",
                "format": "auto",
                "codec": "auto",
                "video": ["4", 0],
            },
        },
    }


def test_video_nodes_map_onto_ours(registry) -> None:
    result = _import(_video_graph(), registry)
    assert result.unsupported == []
    nodes = by_comfy_id(result.workflow)
    assert nodes["1"] == {"type": "LoadVideo", "params": {"path": "clip.mp4"}, "inputs": {}}
    assert nodes["2"]["type"] == "VideoToFrames"
    assert nodes["4"]["inputs"] == {"frames": ["3", "image"], "audio": ["2", "audio"]}
    assert nodes["4"]["params"] == {"fps": 12.0}
    assert nodes["5"]["params"] == {"prefix": "video_ComfyUI", "format": "mp4"}
    # The video's name came from the file: it is confined like a picture's.
    assert result.workflow["meta"]["comfyui"]["names"]["load_video"] == {"path": "clip.mp4"}
    assert check_comfy(result, registry, "test.json") == []


def test_mapped_nodes_export_back_to_api_format(registry, tmp_path: Path, capsys) -> None:
    graph = _video_graph()
    graph["6"] = {"class_type": "PreviewAny", "inputs": {"source": ["7", 0]}}
    graph["7"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "hello"}}
    source = tmp_path / "video.api.json"
    source.write_text(json.dumps(graph))
    imported, exported = tmp_path / "imported.json", tmp_path / "exported.json"
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0, capsys.readouterr().err
    prompt = json.loads(exported.read_text())
    assert is_api_format(prompt)
    # The export writes the import's ComfyUI ids back (our readable ids are the titles).
    assert {nid: n["class_type"] for nid, n in prompt.items()} == {
        nid: node["class_type"] for nid, node in graph.items()
    }
    assert prompt["5"]["_meta"]["title"] == "save_video"
    assert prompt["5"]["inputs"]["filename_prefix"] == "video_ComfyUI"
    assert prompt["4"]["inputs"]["fps"] == 12.0
    assert prompt["4"]["inputs"]["audio"] == ["2", 1]  # GetVideoComponents' audio slot
    # And the export imports again to the same nodes.
    again = _import(prompt, registry)
    assert sorted(n["type"] for n in by_comfy_id(again.workflow).values()) == sorted(
        n["type"] for n in json.loads(imported.read_text())["nodes"].values()
    )


def test_tiled_decode_and_cfg_norm_are_approximated_and_say_how(registry) -> None:
    graph = _base() | {
        "13": {
            "class_type": "KSampler",
            "inputs": {
                "seed": 1,
                "steps": 2,
                "cfg": 7.0,
                "sampler_name": "euler",
                "scheduler": "normal",
                "denoise": 1.0,
                "model": ["60", 0],
                "positive": ["6", 0],
                "negative": ["7", 0],
                "latent_image": ["5", 0],
            },
        },
        "60": {"class_type": "CFGNorm", "inputs": {"strength": 1.0, "model": ["4", 0]}},
    }
    graph["8"] = {
        "class_type": "VAEDecodeTiled",
        "inputs": {
            "tile_size": 768,
            "overlap": 64,
            "temporal_size": 64,
            "temporal_overlap": 8,
            "samples": ["13", 0],
            "vae": ["4", 2],
        },
    }
    result = _import(graph, registry)
    assert result.unsupported == []
    nodes = by_comfy_id(result.workflow)
    assert nodes["13"]["inputs"]["denoiser"] == ["4", "denoiser"]
    assert nodes["8"]["type"] == "VAEDecodeTiled" and nodes["8"]["params"]["tile_size"] == 768
    notes = [str(n) for n in result.notes]
    assert any("CFGNorm" in n and "approximated" in n for n in notes), notes
    assert any("node vae_decode_tiled" in n and "approximated" in n for n in notes), notes


def test_a_preview_of_a_constant_shows_that_text_and_checks_clean(registry) -> None:
    # ComfyUI lets a switch (or an inlined primitive) feed a constant to any input, and PreviewAny shows it;
    # our Show Text takes a wire, so a Text node holding the constant is added and wired in.
    graph = {
        "1": {
            "class_type": "ComfySwitchNode",
            "inputs": {"switch": False, "on_false": "hello", "on_true": "bye"},
        },
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": 7}},  # an inlined number: shown as text
    }
    result = _import(graph, registry)
    nodes = result.workflow["nodes"]
    shown = {}
    for nid in ("preview_any", "preview_any_2"):
        assert nodes[nid]["type"] == "ShowText"
        source = nodes[nid]["inputs"]["text"]
        assert nodes[source[0]]["type"] == "Text" and source[1] == "text"
        shown[nid] = nodes[source[0]]["params"]["text"]
    assert shown == {"preview_any": "hello", "preview_any_2": "7"}
    notes = [str(n) for n in result.notes]
    assert any("node preview_any" in n and "previews the constant 'hello'" in n for n in notes), notes
    assert check_comfy(result, registry, "test.json") == []
