"""Load LLM on ComfyUI's text-encoder single files (pipelines/llm/comfy_te.py): greedy tokens equal transformers'
on the same weights (Krea 2's head-less Qwen3-VL tied to its embedding, FLUX.3's Qwen3-VL with an `lm_head`,
LTX-2's Gemma 3), a file that cannot generate says so, and ComfyUI's `image_krea2_turbo_t2i` runs with its prompt
writer on: the writer's text is what the prompt encode encodes, and the file used in both roles is one ledger
entry (one copy of its bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.comfy_layout_support import assert_greedy_as_transformers

_FILE = {"krea2": "qwen3vl_4b_fp8_scaled.safetensors", "flux3": "qwen3vl_4b_int8_convrot.safetensors"}


def _config_folder(name: str) -> Path:
    from pipelines.diffusion.comfy_layouts.variants import VARIANTS, folder_of

    (variant,) = [v for v in VARIANTS if v.name == name]
    return folder_of(variant) / "text_encoder"


def _write_text_encoder(kind: str, path: Path) -> torch.nn.Module:
    """A seeded tiny text encoder of the shipped tiny config, written as ComfyUI's file; returns the transformers
    causal LM holding the same weights (the reference)."""
    from safetensors.torch import save_file
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLModel,
    )

    from pipelines.diffusion.comfy_layouts.ltx2 import gemma_from_diffusers
    from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

    torch.manual_seed(0)
    if kind == "krea2":  # Qwen3VLModel: no head; its config ties one to the embedding (Qwen3-VL-4B's)
        config = Qwen3VLConfig.from_pretrained(str(_config_folder("krea2-turbo-tiny")))
        encoder = Qwen3VLModel(config).eval()
        state = text_encoder_to_comfy(encoder.state_dict(), "Qwen3VLModel")
        reference = Qwen3VLForConditionalGeneration(config).eval()
        reference.model.load_state_dict(encoder.state_dict())
        reference.tie_weights()
    elif kind == "flux3":  # untied: the file carries its lm_head
        config = Qwen3VLConfig.from_pretrained(str(_config_folder("flux3-tiny")))
        reference = Qwen3VLForConditionalGeneration(config).eval()
        state = text_encoder_to_comfy(reference.state_dict(), "Qwen3VLForConditionalGeneration")
        assert "lm_head.weight" in state
    else:
        config = Gemma3Config.from_pretrained(str(_config_folder("ltx2-tiny")))
        reference = Gemma3ForConditionalGeneration(config).eval()
        state = gemma_from_diffusers(reference.state_dict())
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))
    return reference


@pytest.mark.slow  # builds and runs three tiny LLMs
@pytest.mark.parametrize("kind", ["krea2", "flux3", "gemma3"])
def test_greedy_tokens_equal_transformers(kind: str, tmp_path: Path, cpu_memory) -> None:
    from pipelines.llm.runtime import open_llm

    path = tmp_path / "text_encoders" / _FILE.get(kind, "gemma_3_12B_it_fp4_mixed.safetensors")
    reference = _write_text_encoder(kind, path)
    llm = open_llm(cpu_memory, path)
    assert llm.handle.spec.key.endswith("#text_encoder@float32")  # the diffusion loader's entry for this file
    assert_greedy_as_transformers(cpu_memory, llm, reference)


@pytest.mark.slow  # 0.03 s itself, but ~10 s of imports (transformers, diffusers) when first in a process
def test_a_file_without_head_and_untied_cannot_generate() -> None:
    from transformers import Qwen3VLConfig

    from pipelines.diffusion.families import UnsupportedModelError
    from pipelines.llm.comfy_te import head_source

    untied = Qwen3VLConfig(tie_word_embeddings=False)
    keys = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_norm.weight", "visual.patch_embed.w"]
    with pytest.raises(
        UnsupportedModelError, match=r"^enc\.safetensors: .*no lm_head.*cannot generate"
    ) as exc:
        head_source(keys, untied, "enc.safetensors")
    assert "\n" not in str(exc.value)
    assert head_source([*keys, "lm_head.weight"], untied, "enc.safetensors") == "lm_head"
    assert head_source(keys, Qwen3VLConfig(tie_word_embeddings=True), "enc.safetensors") == "embedding"


@pytest.fixture(scope="module")
def krea2_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ComfyUI models folder holding the tiny Krea 2 Turbo under the templates' file names."""
    from pipelines.diffusion.comfy_layouts.krea2 import write_krea2_files
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("krea2writer")
    return write_krea2_files(copy_demo_model("tiny-krea2-turbo", tmp / "tiny-krea2-turbo"), tmp / "models")


def _run(graph: dict, tmp: Path, name: str):
    from memory import MemoryConfig, MemoryManager
    from nodes.executor import Executor
    from nodes.registry import default_registry
    from nodes.workflow import load_workflow

    registry = default_registry(entry_point_packs=False)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    # policy none: every model stays resident after the run, so the ledger shows every copy the graph made.
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none", data_dir=tmp / f"{name}-memory"))
    result = Executor(registry, memory=mm).run(load_workflow(path, registry), out_dir=tmp / name)
    assert result.ok, result.error
    return result, mm


@pytest.mark.slow  # imports a template and runs it twice on the tiny Krea 2 (2 steps, 32 px, 8 tokens)
def test_krea2_template_with_its_prompt_writer_on(krea2_models: Path, tmp_path: Path) -> None:
    from app.main import main
    from tests.template_runs import template_file

    imported = tmp_path / "krea2.nodeloom.json"
    source = template_file("image_krea2_turbo_t2i")  # as shipped: its "Refine Prompt?" switch is on
    assert main(["import", str(source), "-o", str(imported), "--models-dir", str(krea2_models)]) == 0
    graph = json.loads(imported.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    te_file = krea2_models / "text_encoders" / "qwen3vl_4b_fp8_scaled.safetensors"
    (llm_id,) = [n for n, node in nodes.items() if node["type"] == "LoadLLM"]
    assert nodes[llm_id]["params"]["path"] == te_file.name == nodes["load_clip"]["params"]["path"]
    for node in nodes.values():  # the files by full path; the graph made tiny
        params = node.get("params", {})
        if isinstance(params.get("path"), str) and params["path"].endswith(".safetensors"):
            params["path"] = str(next(krea2_models.rglob(params["path"])))
    nodes["empty_latent_image"]["params"] |= {"width": 32, "height": 32}
    nodes["ksampler"]["params"] |= {"steps": 2, "seed": 7}
    nodes["text_generate"]["params"] |= {"max_new_tokens": 8, "seed": 3}
    assert nodes["text_encode"]["inputs"]["text"][0] == "text_generate"

    result, mm = _run(graph, tmp_path, "writer")
    try:
        text = result.outputs["text_generate"]["text"]
        assert text
        assert result.outputs["text_encode"]["conditioning"].text == text  # what the encode encoded
        # One entry for the file in both roles, resident once: the ledger's bytes are the three models' own.
        keyed = [h for key, h in mm.ledger.handles.items() if key.startswith(str(te_file))]
        assert len(keyed) == 1 and keyed[0].device_bytes == keyed[0].weight_bytes > 0
        assert len(mm.ledger.handles) == 3  # denoiser, VAE, the text encoder / LLM
        assert mm.ledger.device_weights() == sum(h.weight_bytes for h in mm.ledger.handles.values())
        writer_image = result.outputs["vae_decode"]["image"]
    finally:
        mm.close()

    # The same graph fed the generated text directly: the same picture.
    for nid in ("text_generate", "string_concatenate", llm_id):
        del nodes[nid]
        graph.get("ui", {}).get("nodes", {}).pop(nid, None)
    del nodes["text_encode"]["inputs"]["text"]
    nodes["text_encode"]["params"]["text"] = text
    direct, mm = _run(graph, tmp_path, "direct")
    try:
        assert len(mm.ledger.handles) == 3
        # The same tokens through the same float32 modules in this process: the same picture.
        assert torch.equal(direct.outputs["vae_decode"]["image"], writer_image)
    finally:
        mm.close()
