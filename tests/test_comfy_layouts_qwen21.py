"""Qwen-Image 2.1's ComfyUI files, run: the tiny demo models written as ComfyUI's files under the names its
templates load (`models/diffusion_models/qwen_image_2.1_int8_convrot.safetensors`, the Turbo one,
`text_encoders/qwen3vl_8b_int8_convrot.safetensors`, `vae/qwen_image_2.1_vae_bf16.safetensors`; plain float
tensors), loaded by the split loaders, give the diffusers folder's picture; ComfyUI's own templates, run as they
are (`app --run <template> --models-dir`), give `QwenImage21Pipeline`'s picture for the same prompt, seed, size
and steps; and with the transformer and text encoder written as released (`int8_tensorwise` + ConvRot), the
Turbo template gives the pipeline's picture of those weights dequantized.

The templates' prompt-enhancer LLM (a Qwen3.5 file for TextGenerate) is switched off in them, so its node does
not run; a placeholder file under its name satisfies the check that every named model exists.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts.quant_writer import convrot_group, quantize_int8
from pipelines.diffusion.comfy_layouts.qwen21 import QWEN21_FILES, write_qwen21_files
from tests.demo_support import copy_demo_model
from tests.family_support import run_workflow
from tests.test_family_qwenimage21 import reference_pipeline, rgba_picture

pytestmark = pytest.mark.slow  # every case builds tiny models and runs graphs (5-10 s each)

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
ENHANCERS = (
    "qwen3.5_9b_qwen_image_2.1_pe_t2i.int8_convrot.safetensors",
    "qwen3.5_9b_qwen_image_2.1_pe_i2i.int8_convrot.safetensors",
)
EDIT_PICTURES = ("portrait_model_denim.png", "clothing_light_blue_denim_shirt.png")


def picture(path: Path, seed: int, size: tuple[int, int]) -> Path:
    w, h = size
    rng = np.random.RandomState(seed)
    ramp = np.linspace(0, 1, w * h * 3).reshape(h, w, 3)
    Image.fromarray((255 * (0.6 * ramp + 0.4 * rng.rand(h, w, 3))).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def comfy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the base folder, the Turbo folder, a ComfyUI root with models/ and input/)."""
    tmp = tmp_path_factory.mktemp("q21comfy")
    base = copy_demo_model("tiny-qwenimage21", tmp / "tiny-qwenimage21")
    turbo = copy_demo_model("tiny-qwenimage21-turbo", tmp / "tiny-qwenimage21-turbo")
    root = tmp / "ComfyUI"
    write_qwen21_files(base, root / "models")
    write_qwen21_files(turbo, root / "models", turbo=True)
    for name in ENHANCERS:  # switched off in the templates: never loaded (see the module docstring)
        save_file({"unused": torch.zeros(1)}, str(root / "models" / "text_encoders" / name))
    (root / "input").mkdir()
    for i, name in enumerate(EDIT_PICTURES):
        picture(root / "input" / name, i, [(60, 90), (90, 60)][i])
    return base, turbo, root


def test_comfyui_files_give_the_folder_picture(comfy: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, _, root = comfy
    models = root / "models"
    graph = json.loads(TXT2IMG.read_text(encoding="utf-8"))
    nodes = graph["nodes"]
    del nodes["load"]
    nodes["unet"] = {
        "type": "LoadDenoiser",
        "params": {"path": str(models / "diffusion_models" / QWEN21_FILES["transformer"])},
        "inputs": {},
    }
    nodes["clip"] = {
        "type": "LoadTextEncoder",
        "params": {"path": str(models / "text_encoders" / QWEN21_FILES["text_encoder"])},
        "inputs": {},
    }
    nodes["vae"] = {
        "type": "LoadVAE",
        "params": {"path": str(models / "vae" / QWEN21_FILES["vae"])},
        "inputs": {},
    }
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
        "latent.width": 64,
        "latent.height": 96,
        "positive.text": "a small yellow triangle",
        "negative.text": "blurry bad quality",
    }
    assert run_workflow(split, tmp_path / "files", sets) == 0
    assert run_workflow(TXT2IMG, tmp_path / "folder", {**sets, "load.path": str(base)}) == 0
    ours, theirs = rgba_picture(tmp_path / "files"), rgba_picture(tmp_path / "folder")
    assert theirs[..., :3].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights, read tensor by tensor (the SwiGLU halves sliced back out of the fused one).
    assert np.array_equal(ours, theirs)


def _template(name: str) -> tuple[Path, dict]:
    pytest.importorskip("comfyui_workflow_templates_json")
    from benchmarks.comfy_templates import templates_folder

    path = templates_folder() / f"{name}.json"
    return path, json.loads(path.read_text(encoding="utf-8"))


def _prompt_and_seed(data: dict, registry) -> tuple[str, int]:
    """The prompt and seed the imported template runs with; the prompt is the subgraph's first text widget."""
    from nodes.comfy.sources import import_comfy_data

    workflow = import_comfy_data(data, registry, "template", title="template").workflow
    (encode,) = [n for n in workflow["nodes"].values() if n["type"] == "TextEncodeQwenImage21"]
    (sampler,) = [n for n in workflow["nodes"].values() if n["type"] == "Sampler"]
    instance = next(n for n in data["nodes"] if n["type"] == data["definitions"]["subgraphs"][0]["id"])
    shown = next(v for v in instance["widgets_values"] if isinstance(v, str) and len(v) > 20)
    assert encode["params"]["prompt"] == shown  # the template's own prompt reached the encoder
    return encode["params"]["prompt"], sampler["params"]["seed"]


def test_the_turbo_t2i_template_gives_the_pipelines_picture(
    comfy: tuple[Path, Path, Path], tmp_path: Path, registry
) -> None:
    """As shipped: Turbo's 8 ManualSigmas (the folder's sample_sigmas), CFGGuider 1, its prompt and seed."""
    _, turbo, root = comfy
    path, data = _template("image_qwen_image_2_1_turbo_t2i")
    prompt, seed = _prompt_and_seed(data, registry)
    args = ("--models-dir", str(root / "models"))
    sets = {"empty_latent_image.width": 64, "empty_latent_image.height": 96}
    assert run_workflow(path, tmp_path / "out", sets, args) == 0
    ours = rgba_picture(tmp_path / "out")
    image = reference_pipeline(turbo)(
        prompt, height=96, width=64, generator=torch.Generator("cpu").manual_seed(seed)
    ).images[0]
    diff = np.abs(ours.astype(int) - np.asarray(image).astype(int)).max()
    print(f"qwenimage21 turbo t2i template vs pipeline: max uint8 difference {diff}")
    assert diff <= 1  # the same ops on the same kernels; 1 allows a rounding edge


def test_the_image_edit_template_gives_the_pipelines_picture(
    comfy: tuple[Path, Path, Path], tmp_path: Path, registry
) -> None:
    """As shipped (two pictures from input/, KSampler euler at cfg 1), at resolution 96 and 2 steps."""
    base, _, root = comfy
    path, data = _template("image_qwen_image_2_1_image_edit")
    prompt, seed = _prompt_and_seed(data, registry)
    args = ("--models-dir", str(root / "models"))
    sets = {"ksampler.steps": 2, "text_encode_qwen_image21.resolution": 96}
    assert run_workflow(path, tmp_path / "out", sets, args) == 0
    ours = rgba_picture(tmp_path / "out")
    image = reference_pipeline(base)(
        prompt,
        image=[Image.open(root / "input" / n).convert("RGB") for n in EDIT_PICTURES],
        output_resolution=96,
        num_inference_steps=2,
        generator=torch.Generator("cpu").manual_seed(seed),
    ).images[0]
    assert ours.shape == (64, 128, 4)  # the last picture's 3:2 aspect at about 96 x 96 px
    diff = np.abs(ours.astype(int) - np.asarray(image).astype(int)).max()
    print(f"qwenimage21 edit template vs pipeline: max uint8 difference {diff}")
    assert diff <= 1


def dequantized_by_definition(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every 2-D weight as an int8 ConvRot file stores it (the writer's bytes), read back by the format's
    definition, written out here apart from the reader under test: (int8 * row scale), each group of G columns
    times the regular Hadamard matrix kron(H4, ..., H4) / sqrt(G)."""
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float32)
    out = dict(state)
    for key, w in state.items():
        if not (key.endswith(".weight") and w.ndim == 2 and w.is_floating_point()):
            continue
        group = convrot_group(w.shape[1])
        q, scale = quantize_int8(w, group=group)
        rows = q.float() * scale
        if group:
            h = h4
            while h.shape[0] < group:
                h = torch.kron(h, h4)
            rows = (rows.reshape(w.shape[0], -1, group) @ (h / group**0.5)).reshape(w.shape)
        out[key] = rows
    return out


@pytest.fixture(scope="module")
def int8_convrot(
    comfy: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """(a ComfyUI root whose Turbo transformer and text encoder are int8 ConvRot files, the Turbo folder with
    those weights dequantized by definition: quantized per row in diffusers' names, the same rows as the
    file's, whose fused SwiGLU weight is the gate's and up's rows stacked)."""
    from diffusers import QwenImage21Transformer2DModel
    from transformers import Qwen3VLForConditionalGeneration

    _, turbo, _ = comfy
    tmp = tmp_path_factory.mktemp("q21int8")
    root = tmp / "ComfyUI"
    write_qwen21_files(turbo, root / "models", turbo=True, quant="int8_convrot")
    for name in ENHANCERS:  # switched off in the templates: never loaded
        save_file({"unused": torch.zeros(1)}, str(root / "models" / "text_encoders" / name))
    dequantized = tmp / "turbo-dequantized"
    shutil.copytree(turbo, dequantized)
    for sub, cls in (
        ("transformer", QwenImage21Transformer2DModel),
        ("text_encoder", Qwen3VLForConditionalGeneration),
    ):
        model = cls.from_pretrained(str(turbo / sub))
        model.load_state_dict(dequantized_by_definition(model.state_dict()))
        model.save_pretrained(str(dequantized / sub))
    return root, dequantized


def test_the_turbo_template_runs_from_int8_convrot_files(
    int8_convrot: tuple[Path, Path], tmp_path: Path, registry
) -> None:
    from safetensors import safe_open

    root, dequantized = int8_convrot
    for folder, name in (("diffusion_models", "turbo"), ("text_encoders", "text_encoder")):
        with safe_open(str(root / "models" / folder / QWEN21_FILES[name]), framework="pt") as f:
            markers = [k for k in f.keys() if k.endswith(".comfy_quant")]
            assert markers and f.get_slice(markers[0].replace(".comfy_quant", ".weight")).get_dtype() == "I8"
    path, data = _template("image_qwen_image_2_1_turbo_t2i")
    prompt, seed = _prompt_and_seed(data, registry)
    sets = {"empty_latent_image.width": 64, "empty_latent_image.height": 96}
    assert run_workflow(path, tmp_path / "out", sets, ("--models-dir", str(root / "models"))) == 0
    ours = rgba_picture(tmp_path / "out")
    image = reference_pipeline(dequantized)(
        prompt, height=96, width=64, generator=torch.Generator("cpu").manual_seed(seed)
    ).images[0]
    diff = np.abs(ours.astype(int) - np.asarray(image).astype(int)).max()
    print(f"qwenimage21 turbo t2i template from int8_convrot files vs pipeline: max uint8 difference {diff}")
    assert diff <= 1  # the same dequantized weights and ops; 1 allows a rounding edge
