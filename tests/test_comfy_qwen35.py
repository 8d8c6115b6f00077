"""Load LLM on ComfyUI's Qwen3.5 text-encoder files (pipelines/llm/comfy_qwen35.py): the kind is told apart
from Qwen3 / Qwen3-VL, greedy tokens on a seeded tiny Qwen3.5 written in ComfyUI's names equal transformers'
`generate` on the same weights (with and without its vision tower in the file), a picture goes through the
tower, and a file of no shipped size is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipelines.diffusion.comfy_layouts.template_fixtures import save_tiny_qwen35


def test_kind_is_told_apart_from_qwen3_and_qwen3_vl() -> None:
    from pipelines.diffusion.comfy_layouts.text_encoders import text_encoder_kind

    qwen3 = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight"]
    qwen35 = [*qwen3, "model.layers.1.linear_attn.in_proj_qkv.weight", "model.layers.1.linear_attn.A_log"]
    assert text_encoder_kind(qwen3) == "qwen3"
    assert text_encoder_kind([*qwen3, "visual.blocks.0.attn.qkv.weight"]) == "qwen3-vl"
    assert text_encoder_kind(qwen35) == "qwen3.5"
    assert text_encoder_kind([*qwen35, "visual.blocks.0.attn.qkv.weight"]) == "qwen3.5"


@pytest.mark.slow  # builds and runs a tiny Qwen3.5 twice (~10 s of transformers imports first in a process)
@pytest.mark.parametrize("vision", [True, False], ids=["with-tower", "text-only"])
def test_greedy_tokens_equal_transformers(vision: bool, tmp_path: Path, cpu_memory) -> None:
    from pipelines.llm.comfy_te import comfy_te_kind
    from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm

    path = tmp_path / "text_encoders" / "qwen3.5_4b_bf16.safetensors"
    reference = save_tiny_qwen35(path, vision=vision)
    assert comfy_te_kind(path) == "qwen3.5"
    llm = open_llm(cpu_memory, path)
    assert llm.handle.spec.key.endswith("#text_encoder@float32")
    assert llm.takes_images == vision
    prompt = "a red fox in the snow"
    out = generate_text(
        cpu_memory, llm, GenerationRequest(prompt=prompt, chat=False, max_new_tokens=12, kv_cache="dynamic")
    )
    ids = torch.tensor([llm.tokenizer(prompt, add_special_tokens=True)["input_ids"]])
    with torch.no_grad():
        expected = reference.generate(
            ids, max_new_tokens=12, do_sample=False, eos_token_id=list(llm.eos_ids), pad_token_id=0
        )[0, ids.shape[1] :].tolist()
    # The same float32 weights and the same model calls (prefill, then one token a step on a dynamic cache
    # holding the DeltaNet states): the same argmax at every step.
    assert out.result.tokens == expected
    assert len(expected) > 1


@pytest.mark.slow  # builds and runs a tiny Qwen3.5 with its vision tower
def test_a_picture_goes_through_the_tower(tmp_path: Path, cpu_memory) -> None:
    from PIL import Image

    from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm

    path = tmp_path / "qwen3.5_4b_bf16.safetensors"
    save_tiny_qwen35(path)
    llm = open_llm(cpu_memory, path)
    request = GenerationRequest(prompt="describe it", max_new_tokens=6)
    red, blue = Image.new("RGB", (64, 48), (200, 20, 20)), Image.new("RGB", (64, 48), (20, 20, 200))
    first = generate_text(cpu_memory, llm, request, images=[red]).result.tokens
    assert first == generate_text(cpu_memory, llm, request, images=[red]).result.tokens  # greedy: repeatable
    assert (
        first != generate_text(cpu_memory, llm, request, images=[blue]).result.tokens
    )  # the picture is read


@pytest.mark.slow  # ~10 s of transformers imports when first in a process
def test_a_file_of_no_shipped_size_is_refused(tmp_path: Path, cpu_memory) -> None:
    from safetensors.torch import save_file

    from pipelines.diffusion.families import UnsupportedModelError
    from pipelines.llm.runtime import open_llm

    path = tmp_path / "qwen3.5_odd.safetensors"
    save_file({"model.layers.0.linear_attn.in_proj_qkv.weight": torch.zeros(8, 4)}, str(path))
    with pytest.raises(
        UnsupportedModelError, match=r"^qwen3\.5_odd\.safetensors: a Qwen3\.5 file of no size"
    ):
        open_llm(cpu_memory, path)


@pytest.mark.slow  # imports ComfyUI's template and runs it on the tiny Qwen3.5 (with its tower)
def test_text_generation_template_describes_its_picture(tmp_path: Path) -> None:
    """`llm_qwen3_5_text_gen` (CLIPLoader type "stable_diffusion" on `qwen3.5_4b_bf16.safetensors`, a Load
    Image into TextGenerate) imports, checks and runs, the picture wired into LLM Generate (that the tower reads
    it: `test_a_picture_goes_through_the_tower`)."""
    import json

    from app.main import main
    from memory import MemoryConfig, MemoryManager
    from nodes.executor import Executor
    from nodes.registry import default_registry
    from nodes.workflow import load_workflow
    from tests.template_runs import place_pictures, template_file

    models = tmp_path / "ComfyUI" / "models"
    save_tiny_qwen35(models / "text_encoders" / "qwen3.5_4b_bf16.safetensors")
    place_pictures("llm_qwen3_5_text_gen", tmp_path / "ComfyUI")
    imported = tmp_path / "textgen.nodeloom.json"
    source = template_file("llm_qwen3_5_text_gen")
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(source), *dirs]) == 0  # ComfyUI's own file, as a user checks it
    graph = json.loads(imported.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    (writer,) = [n for n, node in nodes.items() if node["type"] == "LLMGenerate"]
    assert nodes[writer]["inputs"]["image"][0] == "load_image"
    (llm_id,) = [n for n, node in nodes.items() if node["type"] == "LoadLLM"]
    nodes[llm_id]["params"]["path"] = str(models / "text_encoders" / "qwen3.5_4b_bf16.safetensors")
    picture = tmp_path / "ComfyUI" / "input" / nodes["load_image"]["params"]["path"]
    nodes["load_image"]["params"]["path"] = str(picture)
    nodes[writer]["params"] |= {"max_new_tokens": 8}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    registry = default_registry(entry_point_packs=False)
    mm = MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path / "memory"))
    try:
        result = Executor(registry, memory=mm).run(load_workflow(path, registry), out_dir=tmp_path / "out")
        assert result.ok, result.error
        assert result.outputs[writer]["text"]
    finally:
        mm.close()
