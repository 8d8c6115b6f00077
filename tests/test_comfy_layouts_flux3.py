"""FLUX.3's ComfyUI files: the transformer's original (Black Forest Labs / ComfyUI) names round-trip to diffusers'
`Flux3Transformer2DModel` and name the family, and the tiny demo written as the files FLUX.3's templates load
(`diffusion_models/flux3-image-klein-base-int8-convrot.safetensors`, `text_encoders/qwen3vl_4b_int8_convrot.
safetensors`, `vae/flux2-vae.safetensors`; plain float tensors: the int8_convrot form is another loader's),
read by the split loaders, gives the diffusers folder's picture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.diffusion.comfy_layouts.flux3 import FLUX3_FILES
from pipelines.diffusion.comfy_layouts.flux3_keys import from_diffusers, to_diffusers

pytestmark = pytest.mark.slow  # builds tiny models (and runs two graphs)

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


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


def test_comfyui_files_give_the_folder_picture(tmp_path: Path) -> None:
    from pipelines.diffusion.comfy_layouts.flux3 import write_flux3_files
    from pipelines.diffusion.demo_models import save_demo_model
    from tests.family_support import only_picture, run_workflow

    folder = save_demo_model("tiny-flux3", tmp_path / "tiny-flux3")
    models = write_flux3_files(folder, tmp_path / "ComfyUI" / "models")
    graph = json.loads(TXT2IMG.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    del nodes["load"]
    files = {
        "unet": ("LoadDenoiser", models / "diffusion_models" / FLUX3_FILES["transformer"]),
        "clip": ("LoadTextEncoder", models / "text_encoders" / FLUX3_FILES["text_encoder"]),
        "vae": ("LoadVAE", models / "vae" / FLUX3_FILES["vae"]),
    }
    for nid, (kind, path) in files.items():  # the family as ComfyUI's CLIPLoader type "flux3" gives it
        nodes[nid] = {"type": kind, "params": {"path": str(path), "family": "flux3"}, "inputs": {}}
    ports = {"denoiser": "unet", "text_encoder": "clip", "vae": "vae"}
    for node in nodes.values():
        for port, link in node.get("inputs", {}).items():
            if isinstance(link, list) and link[0] == "load":
                node["inputs"][port] = [ports[link[1]], link[1]]
    graph.pop("ui", None)
    split = tmp_path / "split.json"
    split.write_text(json.dumps(graph), encoding="utf-8")
    sets = {
        "sampler.scheduler": "default",
        "sampler.steps": 3,
        "sampler.cfg": 3.0,
        "sampler.seed": 42,
        "latent.width": 40,
        "latent.height": 56,
        "positive.text": "a small yellow triangle",
        "negative.text": "blurry bad quality",
    }
    assert run_workflow(split, tmp_path / "files", sets) == 0
    assert run_workflow(TXT2IMG, tmp_path / "folder", {**sets, "load.path": str(folder)}) == 0
    ours, theirs = only_picture(tmp_path / "files"), only_picture(tmp_path / "folder")
    assert theirs.std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights, renamed (the final modulation's halves swapped) and read tensor by tensor:
    # identical pictures, or 1/255 apart where a value sits on a rounding edge.
    assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1
