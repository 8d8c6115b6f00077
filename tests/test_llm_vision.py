"""Pictures into the LLM: tiny Qwen2.5-VL and Qwen3-VL folders answer about an input picture, on the graph as in
ComfyUI.

What a user checks: our prompt with pictures is what transformers' `Qwen2VLProcessor` makes (ids, image-token
marks, patches, grids); the answer's greedy tokens are transformers' `generate` on those processor inputs; a
graph Load LLM -> Load Image -> LLM Generate answers with that text, and another picture gives another
answer; a text-only model refuses a picture, naming the field; ComfyUI's TextGenerate with an image input
imports onto LLM Generate's image input and exports back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from memory import MemoryConfig, MemoryManager
from nodes.executor import Executor
from nodes.workflow import load_workflow
from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
from pipelines.llm.vision import vision_inputs, vision_messages
from tests.llm_vision import VL_FAMILIES, picture, reference_processor, tiny_tokenizer, write_vl_folder

pytestmark = pytest.mark.slow  # builds and runs a model

PROMPT = "Describe this picture in one sentence."
REQUEST = GenerationRequest(prompt=PROMPT, max_new_tokens=16)


@pytest.fixture(scope="session")
def vl_tokenizer() -> Any:
    return tiny_tokenizer()  # trained offline once (seconds)


@pytest.fixture(scope="session", params=VL_FAMILIES)
def vl(request: pytest.FixtureRequest, vl_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(family, folder, model): each tiny VL folder written once for the session."""
    folder = tmp_path_factory.mktemp("vl") / f"tiny-{request.param}"
    return request.param, folder, write_vl_folder(request.param, folder, vl_tokenizer)


def _theirs(vl: Any, images: list[Image.Image], prompt: str = PROMPT) -> tuple[Any, list[int]]:
    """transformers' processor inputs and `generate`'s greedy tokens on them."""
    family, folder, model = vl
    processor = reference_processor(folder, family)
    text = processor.apply_chat_template(
        vision_messages(prompt, len(images)), add_generation_prompt=True, tokenize=False
    )
    inputs = processor(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    return inputs, out[0, inputs["input_ids"].shape[1] :].tolist()


def test_prompt_with_pictures_is_the_processors_and_greedy_tokens_are_transformers(
    vl: Any, tmp_path: Path
) -> None:
    _, folder, model = vl
    one = [Image.open(picture(tmp_path / "a.png", seed=0)).convert("RGB")]
    two = one + [Image.open(picture(tmp_path / "b.png", seed=1, size=(56, 112))).convert("RGB")]
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        llm = open_llm(mm, folder)
        assert llm.takes_images
        for images in (one, two):
            inputs, theirs = _theirs(vl, images)
            ours = vision_inputs(
                llm.tokenizer, llm.image_processor, model.config.image_token_id, PROMPT, images
            )
            assert ours.ids == inputs["input_ids"][0].tolist()
            assert torch.equal(ours.mm_token_type_ids, inputs["mm_token_type_ids"])
            assert torch.equal(ours.image_grid_thw, inputs["image_grid_thw"])
            assert torch.equal(ours.pixel_values, inputs["pixel_values"])  # the same PIL processor class
            got = generate_text(mm, llm, REQUEST, images=images).result.tokens
            # Our loop calls transformers' own model (prefill with the pictures, then one token a step with its
            # rope offset): the same float32 kernels on the same inputs, every token equal.
            assert got == theirs, len(images)
            assert len(set(theirs)) >= 4  # a varied answer, so equal tokens mean the same model ran


def _graph(tmp_path: Path, folder: Path, image: Path) -> Path:
    wf = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "llm": {"type": "LoadLLM", "params": {"path": str(folder)}, "inputs": {}},
            "picture": {"type": "LoadImage", "params": {"path": str(image)}, "inputs": {}},
            "answer": {
                "type": "LLMGenerate",
                "params": {"prompt": PROMPT, "max_new_tokens": 16, "sampling": "greedy"},
                "inputs": {"llm": ["llm", "llm"], "image": ["picture", "image"]},
            },
            "save": {
                "type": "SaveText",
                "params": {"prefix": "answer"},
                "inputs": {"text": ["answer", "text"]},
            },
        },
    }
    path = tmp_path / "vision.json"
    path.write_text(json.dumps(wf))
    return path


def _run(registry: Any, wf_path: Path, out: Path) -> str:
    with MemoryManager(MemoryConfig(device="cpu", policy="sequential", data_dir=out / "data")) as mm:
        result = Executor(registry, memory=mm).run(load_workflow(wf_path, registry), out_dir=out)
    assert result.ok, result.error
    return Path(result.nodes["save"].files[0]).read_text()


def test_the_graph_answers_about_the_input_picture(registry, vl: Any, tmp_path: Path) -> None:
    _, folder, _ = vl
    answers = []
    for seed in (0, 1):
        image = picture(tmp_path / f"in{seed}.png", seed=seed)
        text = _run(registry, _graph(tmp_path, folder, image), tmp_path / f"out{seed}")
        with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
            llm = open_llm(mm, folder)
            pil = [Image.open(image).convert("RGB")]
            direct = generate_text(mm, llm, REQUEST, images=pil)
        assert direct.result.tokens == _theirs(vl, pil)[1]  # transformers' tokens (as above)
        assert text == direct.text.strip()  # the graph's answer is that generation's text
        answers.append(text)
    assert answers[0] != answers[1]  # the picture decides the answer


def test_a_text_only_model_refuses_a_picture(registry, tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType as Q

    from tests.llm_fixtures import tiny_llama, write_tiny_gguf

    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), gguf, Q.F16)
    wf_path = _graph(tmp_path, gguf, picture(tmp_path / "in.png"))
    with MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / "data")) as mm:
        result = Executor(registry, memory=mm).run(load_workflow(wf_path, registry), out_dir=tmp_path / "out")
    assert not result.ok and result.failed_node == "answer"
    assert "field 'image'" in str(result.error) and "takes no pictures" in str(result.error)


def test_comfyuis_text_generate_with_an_image_maps_onto_llm_generate(registry, tmp_path: Path) -> None:
    from app.main import main
    from nodes.comfy.sources import import_comfy_data

    api = {
        "1": {
            "class_type": "CLIPLoader",
            "inputs": {"clip_name": "qwen_2.5_vl_7b.safetensors", "type": "qwen_image"},
        },
        "2": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
        "3": {
            "class_type": "TextGenerate",
            "inputs": {
                "clip": ["1", 0],
                "image": ["2", 0],
                "prompt": "describe this picture",
                "max_length": 64,
                "sampling_mode": "off",
                "thinking": False,
                "use_default_template": True,
            },
        },
        "4": {"class_type": "PreviewAny", "inputs": {"source": ["3", 0]}},
    }
    result = import_comfy_data(api, registry, "tg.json", title="tg")
    generate = result.workflow["nodes"]["text_generate"]
    assert generate["type"] == "LLMGenerate"
    assert generate["inputs"]["image"] == ["load_image", "image"]
    assert not [n for n in result.notes if "image input is not used" in str(n)]
    source, imported, exported = tmp_path / "tg.json", tmp_path / "wf.json", tmp_path / "api.json"
    source.write_text(json.dumps(api))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    assert main(["export-comfy", str(imported), str(exported)]) == 0
    back = json.loads(exported.read_text())
    assert back["3"]["class_type"] == "TextGenerate"
    assert back["3"]["inputs"]["image"] == ["2", 0] and back["3"]["inputs"]["clip"] == ["1", 0]
