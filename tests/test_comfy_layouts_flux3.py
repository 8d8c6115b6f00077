"""FLUX.3's ComfyUI files: the transformer's original (Black Forest Labs / ComfyUI) names round-trip to diffusers'
`Flux3Transformer2DModel` and name the family, and the tiny demo written as the files FLUX.3's templates load
(`diffusion_models/flux3-image-klein-base-int8-convrot.safetensors`, `text_encoders/qwen3vl_4b_int8_convrot.
safetensors`, `vae/flux2-vae.safetensors`; plain float tensors: the int8_convrot form is another loader's),
read by the split loaders of ComfyUI's `image_flux3_klein_t2i` template (imported with `--models-dir`), gives
the picture of the same workflow reading the diffusers folder; as shipped (its Qwen3.5 prompt upsampler on, a
tiny Qwen3.5 under the upsampler's name) the template imports, checks and runs, and the upsampler's text is
what the prompt encode encodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts.flux3_keys import from_diffusers, to_diffusers

pytestmark = pytest.mark.slow  # builds tiny models (and runs two graphs)

UPSAMPLER = "qwen3.5_9b_flux3_prompt_upsampler_w4a8.safetensors"  # the t2i template's prompt upsampler file


def test_original_names_round_trip_and_name_the_family() -> None:
    from diffusers import Flux3Transformer2DModel

    from pipelines.diffusion.comfy_layouts.loaders import denoiser_layout
    from pipelines.diffusion.demo_flux3 import TINY_FLUX3

    torch.manual_seed(0)
    state = Flux3Transformer2DModel(**TINY_FLUX3, flow_map=True).state_dict()
    original = from_diffusers(state)
    assert {"time_in.in_layer.weight", "ref_time_in.out_layer.weight", "txt_in.weight"} <= set(original)
    assert {"early_stream_modulations.image.lin.weight", "content_mode_blocks.image.0.q_proj.weight"} <= set(
        original
    )
    assert "single_blocks.1.norm.query_norm.scale" in original
    back = to_diffusers(original)
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)  # the final modulation's halves swapped back
    assert denoiser_layout([f"model.diffusion_model.{k}" for k in original]) == ("flux3", "comfy")
    assert denoiser_layout(list(state)) == ("flux3", "diffusers")


def _prompt_upsampler_off(name: str, out: Path) -> Path:
    """The template with its subgraph's promoted `switch` (the prompt upsampler: TextGenerate on a Qwen3.5 file)
    set to false: the picture then compares with the diffusers folder's on the template's own prompt."""
    from tests.template_runs import template_file

    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    subgraph = data["definitions"]["subgraphs"][0]
    slot = next(i for i, s in enumerate(subgraph["inputs"]) if s["name"] == "switch")
    (instance,) = [n for n in data["nodes"] if n["type"] == subgraph["id"]]
    assert instance["widgets_values"][slot] is True  # as shipped: the upsampler on
    instance["widgets_values"][slot] = False
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def test_t2i_template_on_its_own_file_names_gives_the_folder_picture(tmp_path: Path) -> None:
    """`image_flux3_klein_t2i` as shipped but for the upsampler: its layout-prompt helper (boxes -> a preview)
    is left out, its CLIPLoader type `flux3` picks the text encoder, and the picture equals the same workflow
    reading the diffusers folder."""
    from app.main import main
    from pipelines.diffusion.comfy_layouts.flux3 import write_flux3_files
    from tests.comfy_layout_support import run_graph
    from tests.demo_support import copy_demo_model
    from tests.template_runs import max_diff, native_graph

    folder = copy_demo_model("tiny-flux3", tmp_path / "tiny-flux3")
    models = write_flux3_files(folder, tmp_path / "ComfyUI" / "models")
    # The upsampler's CLIPLoader stays in the import with nothing reading it (never loaded): a placeholder under
    # its name satisfies the check that every named model exists.
    save_file({"unused": torch.zeros(1)}, str(models / "text_encoders" / UPSAMPLER))
    source = _prompt_upsampler_off("image_flux3_klein_t2i", tmp_path / "t2i.json")
    imported = tmp_path / "t2i.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(imported), *dirs]) == 0
    workflow = json.loads(imported.read_text(encoding="utf-8"))
    assert not any(n["type"] in ("LLMGenerate", "LoadLLM") for n in workflow["nodes"].values())
    sets = {
        "empty_flux2_latent_image.width": 40,
        "empty_flux2_latent_image.height": 56,
        "ksampler.steps": 3,
        "ksampler.seed": 42,
    }
    ours = run_graph(imported, tmp_path / "files", sets, dirs)
    (unused,) = [k for k, n in workflow["nodes"].items() if n["params"].get("path") == UPSAMPLER]
    del workflow["nodes"][unused]  # not run either way; the native copy replaces the other three loaders
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets, dirs)
    assert native[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's files: identical, or 1/255 apart at a rounding edge.
    assert max_diff(ours, native) <= 1


def test_t2i_template_as_shipped_runs_its_prompt_upsampler(tmp_path: Path) -> None:
    from app.main import main
    from pipelines.diffusion.comfy_layouts.flux3 import write_flux3_files
    from pipelines.diffusion.comfy_layouts.template_fixtures import save_tiny_qwen35
    from tests.comfy_layout_support import run_in_process
    from tests.demo_support import copy_demo_model
    from tests.template_runs import template_file

    folder = copy_demo_model("tiny-flux3", tmp_path / "tiny-flux3")
    models = write_flux3_files(folder, tmp_path / "ComfyUI" / "models")
    save_tiny_qwen35(models / "text_encoders" / UPSAMPLER)
    imported = tmp_path / "t2i.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(template_file("image_flux3_klein_t2i")), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(imported), *dirs]) == 0
    graph = json.loads(imported.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    (llm_id,) = [n for n, node in nodes.items() if node["type"] == "LoadLLM"]
    (writer_id,) = [n for n, node in nodes.items() if node["type"] == "LLMGenerate"]
    assert nodes[llm_id]["params"]["path"] == UPSAMPLER
    assert nodes["text_encode"]["inputs"]["text"][0] == writer_id  # the upsampler writes the prompt
    for node in nodes.values():  # the files by full path; the graph made tiny
        params = node.get("params", {})
        if isinstance(params.get("path"), str) and params["path"].endswith(".safetensors"):
            params["path"] = str(next(models.rglob(params["path"])))
    nodes["empty_flux2_latent_image"]["params"] |= {"width": 32, "height": 32}
    nodes["ksampler"]["params"] |= {"steps": 2, "seed": 7}
    nodes[writer_id]["params"] |= {"max_new_tokens": 8, "seed": 3}
    result = run_in_process(graph, tmp_path)
    text = result.outputs[writer_id]["text"]
    assert text  # the tiny Qwen3.5 wrote something
    assert result.outputs["text_encode"]["conditioning"].text == text  # what the encode encoded
    image = result.outputs["vae_decode"]["image"]
    assert image.shape[-3:-1] == (32, 32) and float(image.std()) > 0
