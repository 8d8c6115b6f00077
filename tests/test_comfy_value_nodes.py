"""The 2026 templates' value and helper nodes: GetImageSize and ComfyMathExpression run as ours (the
expression parsed, never eval'd); SaveImageAdvanced, ImageCompare, DifferentialDiffusion and VAEEncodeTiled
map onto our nodes and say what differs; the mapped ones export back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from app.main import main
from nodes.comfy.sources import check_comfy, import_comfy_data
from nodes.comfy.value_nodes import evaluate_expression
from tests.comfy_ids import by_comfy_id


@pytest.mark.parametrize(
    ("expression", "values", "expected"),
    [
        ("a & -8", {"a": 1023}, 1016),  # the templates' round-down to a multiple of 8
        ("max(5, round(a * 24)) + (5 - (max(5, round(a * 24)) % 17)) % 17", {"a": 2.0}, 56),
        ("a / b", {"a": 3, "b": 2}, 1.5),
        ("a > 2 and b < 1", {"a": 3, "b": 0}, True),
        ("a if a > b else b", {"a": 1, "b": 4}, 4),
        ("floor(sqrt(a))", {"a": 17}, 4),
        ("1 < a < 3", {"a": 2}, True),
    ],
)
def test_an_expression_is_computed_as_python_would(expression: str, values: dict, expected) -> None:
    assert evaluate_expression(expression, values) == expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('true')", "Call is not allowed"),
        ("a.real", "Attribute is not allowed"),
        ("9 ** 9 ** 9", "an exponent above 64"),
        ("1 << 100000", "a shift above 64 bits"),
        ("[a]", "List is not allowed"),
        ("z", "Name is not allowed"),
        ("a +", "not an expression"),
        ("a" * 501, "more than 500"),
    ],
)
def test_an_expression_from_a_file_cannot_do_anything_else(expression: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        evaluate_expression(expression, {"a": 2})


def test_the_nodes_run(registry) -> None:
    size = registry["GetImageSize"].run(None, image=torch.zeros(2, 48, 64, 3))
    assert size == {"width": 64, "height": 48, "batch_size": 2}
    out = registry["MathExpression"].run(None, expression="a * b - 0.5", a=3, b=2, c=None, d=None)
    assert out == {"float": 5.5, "int": 5, "bool": True}
    with pytest.raises(ValueError, match="expression 'a / b': division by zero"):
        registry["MathExpression"].run(None, expression="a / b", a=1, b=0, c=None, d=None)


def _graph() -> dict:
    return {
        "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
        "2": {"class_type": "GetImageSize", "inputs": {"image": ["1", 0]}},
        "3": {"class_type": "ComfyMathExpression", "inputs": {"expression": "a & -8", "values.a": ["2", 0]}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "5": {"class_type": "DifferentialDiffusion", "inputs": {"strength": 1.0, "model": ["4", 0]}},
        "6": {
            "class_type": "VAEEncodeTiled",
            "inputs": {"tile_size": 512, "overlap": 64, "pixels": ["1", 0], "vae": ["4", 2]},
        },
        "7": {
            "class_type": "ImageScale",
            "inputs": {
                "image": ["1", 0],
                "upscale_method": "area",
                "width": ["3", 1],
                "height": 512,
                "crop": "disabled",
            },
        },
        "8": {
            "class_type": "SaveImageAdvanced",
            "inputs": {
                "images": ["7", 0],
                "filename_prefix": "out",
                "format": "png",
                "bit_depth": "16-bit",
                "color_space": "sRGB",
            },
        },
        "9": {"class_type": "ImageCompare", "inputs": {"image_a": ["7", 0], "image_b": ["1", 0]}},
        "10": {
            "class_type": "LatentUpscaleBy",
            "inputs": {"samples": ["6", 0], "upscale_method": "nearest-exact", "scale_by": 1.5},
        },
        "11": {"class_type": "PreviewImage", "inputs": {"images": ["12", 0]}},
        "12": {"class_type": "VAEDecode", "inputs": {"samples": ["10", 0], "vae": ["4", 2]}},
    }


def test_the_helper_nodes_map_onto_ours_and_say_what_differs(registry) -> None:
    result = import_comfy_data(_graph(), registry, "x.json", title="x")
    assert result.unsupported == []
    nodes = by_comfy_id(result.workflow)
    assert nodes["3"] == {
        "type": "MathExpression",
        "params": {"expression": "a & -8"},
        "inputs": {"a": ["2", "width"]},
    }
    assert nodes["7"]["inputs"]["width"] == ["3", "int"]  # ComfyUI's INT slot
    assert nodes["6"]["type"] == "VAEEncode" and nodes["8"]["type"] == "SaveImage"
    assert nodes["9"] == {"type": "PreviewImage", "params": {}, "inputs": {"image": ["7", "image"]}}
    assert "5" not in nodes  # DifferentialDiffusion is wired through
    notes = "\n".join(str(n) for n in result.notes)
    for said in (
        "bit_depth '16-bit'",
        "ImageCompare shows image_a only",
        "DifferentialDiffusion is not applied",
        "encoded whole",
    ):
        assert said in notes, notes
    problems = [str(p) for p in check_comfy(result, registry, "x.json")]
    assert not [p for p in problems if "wire" in p or "type" in p.split(":")[1]], problems


def test_a_math_expression_exports_back(tmp_path: Path) -> None:
    source, imported, exported = tmp_path / "x.json", tmp_path / "wf.json", tmp_path / "api.json"
    source.write_text(json.dumps(_graph()))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    prompt = json.loads(exported.read_text())
    assert prompt["3"] == {
        "class_type": "ComfyMathExpression",
        "inputs": {"expression": "a & -8", "values.a": ["2", 0]},
        "_meta": {"title": "comfy_math_expression"},
    }
    assert prompt["2"]["class_type"] == "GetImageSize" and prompt["7"]["inputs"]["width"] == ["3", 1]


def test_resize_image_mask_maps_by_its_resize_type(registry) -> None:
    from nodes.comfy.size_nodes import side_size

    def mapped(inputs: dict) -> dict:
        graph = {
            "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
            "2": {"class_type": "ResizeImageMaskNode", "inputs": {"input": ["1", 0], **inputs}},
        }
        result = import_comfy_data(graph, registry, "r.json", title="r")
        assert result.unsupported == []
        node = by_comfy_id(result.workflow)["2"]
        assert node["inputs"] == {"image": ["1", "image"]}
        return {"type": node["type"], **node["params"]}

    assert mapped(
        {"resize_type": "scale longer dimension", "resize_type.longer_size": 2048, "scale_method": "area"}
    ) == {"type": "ImageScaleToSide", "size": 2048, "method": "area", "side": "longer"}
    assert mapped({"widgets_values": ["scale dimensions", 1920, 1088, "center", "lanczos"]}) == {
        "type": "ImageScale",
        "width": 1920,
        "height": 1088,
        "crop": "center",
        "method": "lanczos",
    }
    assert mapped({"widgets_values": ["scale total pixels", 1, "lanczos"]}) == {
        "type": "ImageScaleToTotalPixels",
        "megapixels": 1,
        "method": "lanczos",
    }
    # ComfyUI's rounding: the other side in proportion, round() of it
    assert side_size(1000, 600, "longer", 2048) == (2048, 1229)
    assert side_size(600, 1000, "shorter", 512) == (512, 853)
    assert side_size(600, 1000, "longer", 512) == (307, 512)
    assert side_size(64, 64, "shorter", 10) == (10, 10)
    out = registry["ImageScaleToSide"].run(
        None, image=torch.rand(1, 30, 20, 3), side="longer", size=60, method="bilinear"
    )
    assert out["image"].shape == (1, 60, 40, 3)


def test_scale_to_side_exports_as_comfyuis_resize_node(tmp_path: Path) -> None:
    resize = {
        "input": ["1", 0],
        "resize_type": "scale shorter dimension",
        "resize_type.shorter_size": 768,
        "scale_method": "bicubic",
    }
    graph = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
        "2": {"class_type": "ResizeImageMaskNode", "inputs": resize},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }
    source, imported, exported = tmp_path / "r.json", tmp_path / "wf.json", tmp_path / "api.json"
    source.write_text(json.dumps(graph))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    assert json.loads(exported.read_text())["2"]["inputs"] == graph["2"]["inputs"]


def test_reference_latent_and_the_empty_video_latent_map_onto_ours(registry, tmp_path: Path) -> None:
    graph = {
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": "wan_2.1_vae.safetensors"}},
        "2": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 832, "height": 480, "length": 33, "batch_size": 1},
        },
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0], "vae": ["1", 0]}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
        "5": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen_3_4b.safetensors", "type": "flux2"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["5", 0]}},
        "7": {"class_type": "VAEEncode", "inputs": {"pixels": ["3", 0], "vae": ["1", 0]}},
        "8": {"class_type": "ReferenceLatent", "inputs": {"conditioning": ["6", 0], "latent": ["7", 0]}},
        "9": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["8", 0]}},
    }
    result = import_comfy_data(graph, registry, "v.json", title="v")
    assert result.unsupported == []
    nodes = by_comfy_id(result.workflow)
    assert nodes["2"] == {
        "type": "EmptyVideoLatent",
        "params": {"width": 832, "height": 480, "frames": 33},
        "inputs": {"vae": ["1", "vae"]},  # the graph's one VAE sizes ours
    }
    assert nodes["8"] == {
        "type": "ReferenceLatent",
        "params": {},
        "inputs": {"conditioning": ["6", "conditioning"], "latent": ["7", "latent"]},
    }
    source, imported, exported = tmp_path / "v.json", tmp_path / "wf.json", tmp_path / "api.json"
    source.write_text(json.dumps(graph))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    prompt = json.loads(exported.read_text())
    assert prompt["2"]["inputs"] == graph["2"]["inputs"]
    assert prompt["8"]["inputs"] == graph["8"]["inputs"]
