"""Krea 2's ComfyUI files: the transformer's ComfyUI names round-trip to diffusers' `Krea2Transformer2DModel`,
the family and form are read from the tensors, the shipped released-size config has the shapes ComfyUI's own
model code gives Krea 2, and ComfyUI's Krea 2 Turbo templates (`image_krea2_turbo_t2i`, `_int8`), imported
against a models folder holding the tiny Turbo under the templates' own file names
(`diffusion_models/krea2_turbo_fp8_scaled.safetensors`, `text_encoders/qwen3vl_4b_fp8_scaled.safetensors`,
`vae/qwen_image_vae.safetensors`; plain float tensors), pass `app check` and give the picture of the same
workflow reading the diffusers folder.

The templates' prompt writer (TextGenerate on the Qwen3-VL file, switched on by their "Refine Prompt?" boolean)
is switched off here, so the picture compares with the folder's; it runs on in tests/test_comfy_te_llm.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pipelines.diffusion.comfy_layouts.krea2 import KREA2_FILES, from_diffusers, to_diffusers

pytestmark = pytest.mark.slow  # builds tiny models (and, for the templates, runs two graphs)


def test_comfy_names_round_trip_and_name_the_family() -> None:
    from diffusers import Krea2Transformer2DModel

    from pipelines.diffusion.comfy_layouts.loaders import denoiser_layout
    from pipelines.diffusion.demo_krea2 import TINY_KREA2

    torch.manual_seed(0)
    state = Krea2Transformer2DModel(**TINY_KREA2).state_dict()
    comfy = from_diffusers(state)
    # ComfyUI's names (comfy/ldm/krea2/model.py), the block's modulation stored flat.
    assert comfy["blocks.0.mod.lin"].shape == (6 * 48,)
    assert {"first.weight", "tproj.1.weight", "txtmlp.0.scale", "last.modulation.lin"} <= set(comfy)
    assert "txtfusion.layerwise_blocks.0.attn.qknorm.qnorm.scale" in comfy
    back = to_diffusers(comfy)
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)
    assert denoiser_layout(list(comfy)) == ("krea2", "comfy")
    assert denoiser_layout([f"model.diffusion_model.{k}" for k in comfy]) == ("krea2", "comfy")
    assert denoiser_layout(list(state)) == ("krea2", "diffusers")


def _mlp(features: int) -> int:
    """ComfyUI's SwiGLU width for Krea 2 (multiplier 4, rounded up to 128)."""
    width = int(2 * features / 3) * 4
    return 128 * ((width + 127) // 128)


def test_released_config_has_comfyuis_shapes() -> None:
    """The shipped `krea-2-turbo` folder gives the shapes ComfyUI's SingleStreamDiT defaults make (width 6144,
    48 / 12 heads, 28 blocks, a 12-tap text fusion at 2560 with its own 20 heads), in ComfyUI's names."""
    from diffusers import Krea2Transformer2DModel

    from pipelines.diffusion.comfy_layouts.common import config_of
    from pipelines.diffusion.comfy_layouts.variants import VARIANTS, module_shapes

    (turbo,) = [v for v in VARIANTS if v.name == "krea-2-turbo"]
    config = config_of(turbo, "transformer")
    wanted = module_shapes(lambda: Krea2Transformer2DModel.from_config(config))
    meta = from_diffusers({k: torch.empty(s, device="meta") for k, s in wanted.items()})
    shapes = {k: tuple(t.shape) for k, t in meta.items()}
    assert shapes["first.weight"] == (6144, 16 * 2 * 2)
    assert shapes["blocks.0.mlp.gate.weight"] == (_mlp(6144), 6144)
    assert shapes["blocks.0.attn.wk.weight"] == (6144 // 48 * 12, 6144)
    assert shapes["txtfusion.layerwise_blocks.1.mlp.up.weight"] == (_mlp(2560), 2560)
    assert shapes["txtfusion.refiner_blocks.1.attn.wq.weight"] == (2560, 2560)
    assert shapes["txtfusion.projector.weight"] == (1, 12)
    assert max(int(k.split(".")[1]) for k in shapes if k.startswith("blocks.")) == 27
    index = json.loads((turbo.folder / "model_index.json").read_text(encoding="utf-8"))
    assert index["is_distilled"] and len(index["text_encoder_select_layers"]) == 12


@pytest.fixture(scope="module")
def comfy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny Turbo's diffusers folder, a ComfyUI models folder with it as the templates' files)."""
    from pipelines.diffusion.comfy_layouts.krea2 import write_krea2_files
    from tests.demo_support import copy_demo_model

    tmp = tmp_path_factory.mktemp("krea2comfy")
    turbo = copy_demo_model("tiny-krea2-turbo", tmp / "tiny-krea2-turbo")
    models = write_krea2_files(turbo, tmp / "ComfyUI" / "models")
    # The int8 template's transformer name holds the same plain tensors (the loader reads the form, not the name).
    os.link(
        models / "diffusion_models" / KREA2_FILES["turbo"],
        models / "diffusion_models" / "krea2_turbo_int8_convrot.safetensors",
    )
    return turbo, models


def _prompt_writer_off(name: str, out: Path) -> Path:
    """The template with its "Refine Prompt?" boolean (a promoted widget of its subgraph) set to false, on the
    subgraph instance and on the inner node."""
    from tests.template_runs import template_file

    data = json.loads(template_file(name).read_text(encoding="utf-8"))
    subgraph = data["definitions"]["subgraphs"][0]
    (boolean,) = [n for n in subgraph["nodes"] if "Refine Prompt" in (n.get("title") or "")]
    link = next(i["link"] for i in boolean["inputs"] if i["name"] == "value")
    slot = next(i for i, s in enumerate(subgraph["inputs"]) if link in s.get("linkIds", []))
    (instance,) = [n for n in data["nodes"] if n["type"] == subgraph["id"]]
    assert instance["widgets_values"][slot] is True  # as shipped: the prompt writer on
    instance["widgets_values"][slot] = False
    boolean["widgets_values"] = [False]  # the inner node's value too (which this importer reads for it)
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


@pytest.mark.parametrize("template", ["image_krea2_turbo_t2i", "image_krea2_turbo_t2i_int8"])
def test_turbo_template_on_its_own_file_names_gives_the_folder_picture(
    template: str, comfy: tuple[Path, Path], tmp_path: Path
) -> None:
    from app.main import main
    from tests.comfy_layout_support import run_graph
    from tests.template_runs import max_diff, native_graph

    folder, models = comfy
    source = _prompt_writer_off(template, tmp_path / f"{template}.json")
    imported = tmp_path / f"{template}.nodeloom.json"
    dirs = ("--models-dir", str(models))
    assert main(["import", str(source), "-o", str(imported), *dirs]) == 0
    assert main(["check", str(imported), *dirs]) == 0
    workflow = json.loads(imported.read_text(encoding="utf-8"))
    assert not any(n["type"] == "LLMGenerate" for n in workflow["nodes"].values())
    if template.endswith("_int8"):
        return  # the same graph as the fp8 one but for the transformer's name: imported and checked only
    # 5 x 7 packed patches (4 px per latent x 2x2): nothing square assumed; 3 steps of the template's euler.
    sets = {
        "empty_latent_image.width": 40,
        "empty_latent_image.height": 56,
        "ksampler.steps": 3,
        "ksampler.seed": 42,
    }
    ours = run_graph(imported, tmp_path / "files", sets, dirs)
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets, dirs)
    assert native[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's files instead of the folder (renamed, the modulation
    # reshaped): identical pictures, or 1/255 apart where a value sits on a rounding edge.
    assert max_diff(ours, native) <= 1


def test_fp8_scaled_base_file_takes_the_base_config(comfy: tuple[Path, Path], tmp_path: Path) -> None:
    """ComfyUI's fp8-scaled form is read from the tensors; a name without "turbo" takes the base config (the
    resolution-dependent shift), the templates' Turbo name the Turbo one (a fixed shift)."""
    from safetensors.torch import load_file, save_file

    from memory import MemoryManager
    from pipelines.diffusion.comfy_layouts.loaders import load_comfy_denoiser
    from pipelines.diffusion.comfy_layouts.scaled_fp8 import scaled_fp8_state

    _, models = comfy
    plain = load_file(str(models / "diffusion_models" / KREA2_FILES["turbo"]))
    base = tmp_path / "krea2_fp8_scaled.safetensors"
    save_file(scaled_fp8_state(plain), str(base))
    mm = MemoryManager()
    try:
        ref, message = load_comfy_denoiser(mm, base)
        assert "float8_e4m3fn" in message and "config: Krea 2 (tiny demo)" in message  # comfy_quant form
        assert not ref.scheduler_config.get("is_distilled")
        turbo, message = load_comfy_denoiser(mm, models / "diffusion_models" / KREA2_FILES["turbo"])
        assert "plain" in message and "Turbo" in message and turbo.scheduler_config["is_distilled"]
    finally:
        mm.close()
