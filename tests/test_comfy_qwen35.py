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
from tests.comfy_layout_support import assert_greedy_as_transformers, run_in_process


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
    from pipelines.llm.runtime import open_llm

    path = tmp_path / "text_encoders" / "qwen3.5_4b_bf16.safetensors"
    reference = save_tiny_qwen35(path, vision=vision)
    assert comfy_te_kind(path) == "qwen3.5"
    llm = open_llm(cpu_memory, path)
    assert llm.handle.spec.key.endswith("#text_encoder@float32")
    assert llm.takes_images == vision
    # Prefill, then one token a step on a dynamic cache holding the DeltaNet states, as transformers does.
    assert_greedy_as_transformers(cpu_memory, llm, reference)


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
    from tests.template_runs import place_pictures, template_file

    models = tmp_path / "ComfyUI" / "models"
    save_tiny_qwen35(models / "text_encoders" / "qwen3.5_4b_bf16.safetensors")
    place_pictures("llm_qwen3_5_text_gen", tmp_path / "ComfyUI")
    imported = tmp_path / "textgen.nodeloom.json"
    source = template_file("llm_qwen3_5_text_gen")
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    # ComfyUI's own file, as a user checks it: refused, as a released Qwen3.5 file has no tokenizer here (the
    # tiny one's is shipped, so the run below goes on).
    assert main(["check", str(source), *dirs]) == 2
    graph = json.loads(imported.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    (writer,) = [n for n, node in nodes.items() if node["type"] == "LLMGenerate"]
    assert nodes[writer]["inputs"]["image"][0] == "load_image"
    (llm_id,) = [n for n, node in nodes.items() if node["type"] == "LoadLLM"]
    nodes[llm_id]["params"]["path"] = str(models / "text_encoders" / "qwen3.5_4b_bf16.safetensors")
    picture = tmp_path / "ComfyUI" / "input" / nodes["load_image"]["params"]["path"]
    nodes["load_image"]["params"]["path"] = str(picture)
    nodes[writer]["params"] |= {"max_new_tokens": 8}
    assert run_in_process(graph, tmp_path).outputs[writer]["text"]


def _greedy(memory, path: Path, prompt: str = "a red fox in the snow") -> tuple[list[int], list[int]]:
    """(Load LLM's greedy tokens, the ids of `prompt`) on a ComfyUI Qwen3.5 file."""
    from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm

    llm = open_llm(memory, path)
    out = generate_text(memory, llm, GenerationRequest(prompt=prompt, chat=False, max_new_tokens=12))
    return out.result.tokens, llm.tokenizer(prompt, add_special_tokens=True)["input_ids"]


@pytest.mark.slow  # builds and runs a tiny Qwen3.5
def test_an_int8_convrot_file_reads_dequantized(tmp_path: Path, cpu_memory) -> None:
    """ComfyUI's int8 ConvRot form (the Qwen-Image 2.1 prompt enhancers' `*.int8_convrot`): read through the
    `comfy_quant` reader, it generates what transformers does on the same weights quantized and read back."""
    from safetensors.torch import load_file, save_file

    from pipelines.diffusion.comfy_layouts.quant_writer import comfy_quant_state, fake_quantized

    plain = tmp_path / "plain.safetensors"
    reference = save_tiny_qwen35(plain, vision=False)
    state = load_file(str(plain))
    path = tmp_path / "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors"
    save_file(comfy_quant_state(state, "int8_convrot"), str(path))
    back = fake_quantized(state, "int8_convrot")
    assert not torch.equal(
        back["model.layers.0.linear_attn.in_proj_qkv.weight"],
        state["model.layers.0.linear_attn.in_proj_qkv.weight"],
    )  # really quantized
    hf = {
        ("model.language_model." + k.removeprefix("model.")) if k.startswith("model.") else k: v
        for k, v in back.items()
    }
    missing, unexpected = reference.load_state_dict(hf, strict=False)
    assert not unexpected and all(k.startswith("model.visual.") for k in missing)
    tokens, ids = _greedy(cpu_memory, path)
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=[0, 2], pad_token_id=0
        )[0, len(ids) :].tolist()
    # The same dequantized float32 weights (the reader's formula is the writer's inverse, checked in
    # test_comfy_quant): the same argmax at every step.
    assert tokens == expected
    assert len(expected) > 1


@pytest.mark.slow  # ~10 s of transformers imports when first in a process
def test_a_quantized_form_not_read_here_is_refused_by_name(tmp_path: Path, cpu_memory) -> None:
    from safetensors.torch import load_file, save_file

    from pipelines.diffusion.comfy_layouts.quant_writer import marker
    from pipelines.llm.runtime import open_llm

    plain = tmp_path / "plain.safetensors"
    save_tiny_qwen35(plain, vision=False)
    state = load_file(str(plain))
    state["model.layers.0.mlp.up_proj.comfy_quant"] = marker({"format": "int4_w4a8"})
    path = tmp_path / "qwen3.5_9b_flux3_prompt_upsampler_w4a8.safetensors"
    save_file(state, str(path))
    with pytest.raises(
        ValueError, match=r"qwen3\.5_9b_flux3_prompt_upsampler_w4a8\.safetensors.*int4_w4a8"
    ) as exc:
        open_llm(cpu_memory, path)
    assert "\n" not in str(exc.value)


@pytest.mark.slow  # writes the tiny Qwen-Image 2.1 and runs its template (~10 s)
def test_qwen_image_21_template_runs_with_its_prompt_enhancer_on(tmp_path: Path) -> None:
    """`image_qwen_image_2_1_t2i` with its subgraph's `switch` (the Qwen3.5 prompt enhancer) turned on: the
    enhancer's Load LLM feeds the prompt encode, and the template checks and runs on the tiny files."""
    import json

    from app.main import main
    from pipelines.diffusion.comfy_layouts.qwen21 import write_qwen21_files
    from tests.comfy_layout_support import run_graph
    from tests.demo_support import copy_demo_model
    from tests.template_runs import template_file

    enhancer = "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors"
    models = write_qwen21_files(copy_demo_model("tiny-qwenimage21", tmp_path / "q21"), tmp_path / "models")
    save_tiny_qwen35(models / "text_encoders" / enhancer)
    data = json.loads(template_file("image_qwen_image_2_1_t2i").read_text(encoding="utf-8"))
    subgraph = data["definitions"]["subgraphs"][0]
    slot = next(i for i, s in enumerate(subgraph["inputs"]) if s["name"] == "switch")
    (instance,) = [n for n in data["nodes"] if n["type"] == subgraph["id"]]
    assert instance["widgets_values"][slot] is False  # as shipped: the enhancer off
    instance["widgets_values"][slot] = True
    source = tmp_path / "t2i.json"
    source.write_text(json.dumps(data), encoding="utf-8")
    imported = tmp_path / "t2i.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(source), *dirs]) == 2  # a released Qwen3.5 file would have no tokenizer here
    nodes = json.loads(imported.read_text(encoding="utf-8"))["nodes"]
    (llm,) = [node for node in nodes.values() if node["type"] == "LoadLLM"]
    assert llm["params"]["path"] == enhancer
    (writer,) = [n for n, node in nodes.items() if node["type"] == "LLMGenerate"]
    assert (
        nodes["text_encode_qwen_image21"]["inputs"]["prompt"][0] == writer
    )  # the enhancer writes the prompt
    sets = {"empty_latent_image.width": 32, "empty_latent_image.height": 32, f"{writer}.max_new_tokens": 8}
    (picture,) = run_graph(imported, tmp_path / "out", {**sets, "ksampler.steps": 2}, dirs)
    assert picture.shape[:2] == (32, 32)


def _configs_like_tiny(root: Path, *, tokenizer: bool, tied: bool) -> Path:
    """A resources/ folder whose `qwen3.5-tiny` is the shipped one, its head tied or not, with or without its
    tokenizer (as the released sizes ship none)."""
    import json
    import shutil

    from pipelines.paths import RESOURCES_DIR

    shipped = RESOURCES_DIR / "configs" / "qwen3.5-tiny"
    folder = root / "configs" / "qwen3.5-tiny"
    shutil.copytree(shipped / "text_encoder", folder / "text_encoder")
    if tokenizer:
        shutil.copytree(shipped / "tokenizer", folder / "tokenizer")
    config_file = folder / "text_encoder" / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tie_word_embeddings"] = config["text_config"]["tie_word_embeddings"] = tied
    config_file.write_text(json.dumps(config), encoding="utf-8")
    return root


@pytest.mark.slow  # builds and runs a tiny Qwen3.5
def test_a_tied_head_file_without_lm_head_generates(
    tmp_path: Path, cpu_memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 4B's form: no `lm_head` in the file, the config ties it to the embedding."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from pipelines.llm import comfy_qwen35

    resources = _configs_like_tiny(tmp_path / "resources", tokenizer=True, tied=True)
    monkeypatch.setattr(comfy_qwen35, "RESOURCES_DIR", resources)
    plain = tmp_path / "plain.safetensors"
    save_tiny_qwen35(plain)
    state = load_file(str(plain))
    del state["lm_head.weight"]
    path = tmp_path / "qwen3.5_4b_bf16.safetensors"
    save_file(state, str(path))
    config = Qwen3_5Config.from_pretrained(str(resources / "configs" / "qwen3.5-tiny" / "text_encoder"))
    reference = Qwen3_5ForConditionalGeneration(config).eval()
    hf = {
        ("model.language_model." + k.removeprefix("model.") if k.startswith("model.") else "model." + k): v
        for k, v in state.items()
    }
    missing, unexpected = reference.load_state_dict(hf, strict=False)
    assert not unexpected and missing == ["lm_head.weight"]
    assert reference.lm_head.weight is reference.model.language_model.embed_tokens.weight  # tied
    tokens, ids = _greedy(cpu_memory, path)
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=[0, 2], pad_token_id=0
        )[0, len(ids) :].tolist()
    assert tokens == expected  # same float32 weights, same calls: the same argmax at every step
    assert len(expected) > 1  # a head of zeros would stop at once (token 0 ends the text)


@pytest.mark.slow  # ~10 s of transformers imports when first in a process
def test_a_size_without_a_shipped_tokenizer_says_so(
    tmp_path: Path, cpu_memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.diffusion.families import UnsupportedModelError
    from pipelines.llm import comfy_qwen35
    from pipelines.llm.runtime import open_llm

    resources = _configs_like_tiny(tmp_path / "resources", tokenizer=False, tied=False)
    monkeypatch.setattr(comfy_qwen35, "RESOURCES_DIR", resources)
    path = tmp_path / "qwen3.5_9b_bf16.safetensors"
    save_tiny_qwen35(path)
    with pytest.raises(
        UnsupportedModelError, match=r"^qwen3\.5_9b_bf16\.safetensors: .*no tokenizer is shipped"
    ):
        open_llm(cpu_memory, path)
