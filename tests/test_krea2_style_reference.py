"""Krea 2 with a reference picture, as ComfyUI's style-reference template runs it: the transformer's forward
with reference tokens equals diffusers' own when every token shares one timestep (so the plain path is
unchanged), "index_timestep_zero" changes the velocity through the references alone, Qwen3-VL's patches are
laid out as transformers' processor lays them, the taps are each decoder layer's input (DeepStack included) as
ComfyUI reads them, and `image_krea2_turbo_int8_image_style_reference` runs on the
tiny Turbo under its own file names and gives the folder's picture; the reference picture steers the latents
(at the clean timestep differently from the step's), and, as ComfyUI's model, the references are ignored when
no method is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from pipelines.diffusion.krea2_refs import krea2_forward, reference_tokens
from pipelines.diffusion.krea2_sampling import position_ids

TEMPLATE = "image_krea2_turbo_int8_image_style_reference"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.demo_support import copy_demo_model

    return copy_demo_model("tiny-krea2-turbo", tmp_path_factory.mktemp("krea2") / "tiny-krea2-turbo")


@pytest.fixture(scope="module")
def transformer(folder: Path) -> torch.nn.Module:
    from diffusers import Krea2Transformer2DModel

    return Krea2Transformer2DModel.from_pretrained(str(folder), subfolder="transformer").eval()


def _inputs(model: torch.nn.Module, refs: int) -> dict[str, torch.Tensor]:
    """A 3 x 4 grid of image tokens, a 5-token prompt (its last token padded) and `refs` odd-sided references."""
    gen = torch.Generator().manual_seed(0)
    config = model.config
    channels = config.in_channels // 4
    x = torch.randn(1, 12, config.in_channels, generator=gen)
    text = torch.randn(1, 5, config.num_text_layers, config.text_hidden_dim, generator=gen)
    mask = torch.tensor([[True, True, True, True, False]])
    ids = position_ids(5, 3, 4, "cpu")
    latents = [torch.randn(1, channels, 3, 5, generator=gen) for _ in range(refs)]  # padded to 4 x 6
    if latents:
        tokens, ref_ids = reference_tokens(latents, 1, "cpu", torch.float32)
    else:
        tokens, ref_ids = x[:, :0], ids[:0]
    return {"x": x, "text": text, "mask": mask, "ids": ids, "refs": tokens, "ref_ids": ref_ids}


def _library(
    model: torch.nn.Module, hidden: torch.Tensor, inp: dict, t: float, ids: torch.Tensor
) -> torch.Tensor:
    return model(
        hidden_states=hidden,
        encoder_hidden_states=inp["text"],
        timestep=torch.tensor([t]),
        position_ids=ids,
        encoder_attention_mask=inp["mask"],
        return_dict=False,
    )[0]


def _ours(model: torch.nn.Module, inp: dict, t: float, *, timestep_zero: bool) -> torch.Tensor:
    ids = torch.cat([inp["ids"], inp["ref_ids"]])
    return krea2_forward(
        model,
        inp["x"],
        inp["refs"],
        inp["text"],
        torch.tensor([t]),
        ids,
        inp["mask"],
        timestep_zero=timestep_zero,
    )


@torch.no_grad()
@pytest.mark.parametrize("timestep_zero", [False, True])
def test_with_no_reference_the_forward_is_diffusers_own(
    transformer: torch.nn.Module, timestep_zero: bool
) -> None:
    inp = _inputs(transformer, refs=0)
    ours = _ours(transformer, inp, 0.6, timestep_zero=timestep_zero)
    theirs = _library(transformer, inp["x"], inp, 0.6, inp["ids"])
    assert torch.equal(ours, theirs)  # the same operations on the same rows


@torch.no_grad()
def test_one_timestep_for_all_tokens_is_diffusers_forward_over_the_joined_sequence(
    transformer: torch.nn.Module,
) -> None:
    inp = _inputs(transformer, refs=2)
    assert inp["refs"].shape[1] == 2 * 2 * 3  # each 3 x 5 latent padded to 4 x 6: 2 x 3 patches
    assert inp["ref_ids"][:, 0].unique().tolist() == [1.0, 2.0]  # numbered after the image (index 0)
    joined = torch.cat([inp["x"], inp["refs"]], dim=1)
    ids = torch.cat([inp["ids"], inp["ref_ids"]])
    image = inp["x"].shape[1]
    # float32 matmuls over more rows may block differently; the values agree far below a latent's scale.
    for t, timestep_zero in ((0.6, False), (0.0, True)):
        theirs = _library(transformer, joined, inp, t, ids)[:, :image]
        torch.testing.assert_close(
            _ours(transformer, inp, t, timestep_zero=timestep_zero), theirs, atol=1e-5, rtol=0
        )


@torch.no_grad()
def test_timestep_zero_changes_the_velocity_through_the_references(transformer: torch.nn.Module) -> None:
    inp = _inputs(transformer, refs=1)
    plain = _ours(transformer, inp, 1.0, timestep_zero=False)
    zero = _ours(transformer, inp, 1.0, timestep_zero=True)
    # The tiny model's seeded timestep tables are small, so the change is too (about 1e-3), but far above the
    # float32 noise of these values (the forward is bit-exact when nothing differs, above).
    assert (plain - zero).abs().max() > 1e-4


def test_qwen3vl_patches_are_laid_out_as_transformers_processor_lays_them() -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.krea2_pictures import qwen3vl_patches

    rng = np.random.default_rng(0)
    picture = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)  # sides multiples of 32: no resize either way
    vision = {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
    ours, grid = qwen3vl_patches(torch.from_numpy(picture).float().div(255)[None], vision)
    processor = Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    theirs = processor(images=[Image.fromarray(picture)], do_resize=False, return_tensors="pt")
    assert grid.tolist() == theirs["image_grid_thw"].tolist() == [[1, 4, 6]]
    # The same 8-bit values scaled in float32, by a division here and a multiplication there.
    torch.testing.assert_close(ours, theirs["pixel_values"].float(), atol=1e-6, rtol=0)


def _picture(flip: bool) -> torch.Tensor:
    """IMAGE (1, 48, 64, 3): a colour ramp with a square (or its mirror image with the colours reversed)."""
    ys, xs = np.mgrid[0:48, 0:64]
    rgb = np.stack([xs * 4, ys * 5, np.full_like(xs, 96)], -1)
    rgb[12:24, 16:32] = (240, 240, 40)
    if flip:
        rgb = rgb[:, ::-1, ::-1]
    return torch.from_numpy(np.ascontiguousarray(rgb)).float().div(255)[None]


@torch.no_grad()
def test_the_reference_steers_the_latents_and_without_a_method_is_ignored(folder: Path, cpu_memory) -> None:
    from dataclasses import replace

    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.krea2_pictures import encode_krea2_pictures
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents

    model = load_model(cpu_memory, str(folder))
    settings = SamplerSettings(scheduler="euler", steps=3, cfg=0.0, seed=42)
    latents = Latents(torch.zeros(1, model.vae.latent_channels, 14, 10), model.vae.scale_factor)

    def run(picture: torch.Tensor, method: str | None) -> torch.Tensor:
        cond = encode_krea2_pictures(
            cpu_memory,
            model.text_encoder,
            "a yeti",
            [picture],
            vae=model.vae,
            vl_area=64 * 64,
            vae_area=48 * 32,
        )
        assert len(cond.references) == 1 and cond.attention_mask is None  # exact tokens, as ComfyUI's
        cond = replace(cond, reference_method=method)
        return sample(cpu_memory, model.denoiser, cond, None, latents, settings).samples

    picture, other = _picture(flip=False), _picture(flip=True)
    with_refs = run(picture, "index_timestep_zero")
    # The tiny model's seeded weights are small, so the picture moves the latents little (about 1e-3), but
    # far above float32 noise: the same run repeats bit for bit.
    assert torch.equal(with_refs, run(picture, "index_timestep_zero"))
    assert (with_refs - run(other, "index_timestep_zero")).abs().max() > 1e-4
    assert (with_refs - run(picture, "index")).abs().max() > 1e-4  # the clean timestep is the method's point
    # No method: ComfyUI's Krea 2 reads no references, so the latents are those of the prompt without them.
    cond = encode_krea2_pictures(
        cpu_memory, model.text_encoder, "a yeti", [picture], vae=None, vl_area=64 * 64
    )
    plain = sample(cpu_memory, model.denoiser, cond, None, latents, settings).samples
    assert torch.equal(run(picture, None), plain)


def _save_picture(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((_picture(flip=False)[0].numpy() * 255).round().astype(np.uint8)).save(path)
    return path


@pytest.mark.slow  # writes the tiny files and runs four small graphs (a few seconds each)
def test_style_reference_template_runs_on_its_file_names_and_gives_the_folder_picture(
    folder: Path, tmp_path: Path
) -> None:
    from nodes.comfy.export import export_api
    from nodes.registry import default_registry
    from nodes.workflow import load_workflow
    from pipelines.diffusion.comfy_layouts.krea2 import KREA2_FILES, write_krea2_files
    from tests.comfy_layout_support import run_graph
    from tests.template_runs import import_template, max_diff, native_graph, place_loras, template_file

    template_file(TEMPLATE)  # skips without ComfyUI's template package
    root = tmp_path / "ComfyUI"
    models = write_krea2_files(folder, root / "models")
    os.link(
        models / "diffusion_models" / KREA2_FILES["turbo"],
        models / "diffusion_models" / "krea2_turbo_int8_convrot.safetensors",
    )
    place_loras(TEMPLATE, models, folder, "krea2")
    picture = _save_picture(root / "input" / "krea2_reference_image.png")
    dirs = ("--models-dir", str(models))
    workflow = import_template(TEMPLATE, models, tmp_path / f"{TEMPLATE}.nodeloom.json")
    nodes = workflow["nodes"]
    assert nodes["flux_kontext_multi_reference_latent_meth"]["params"] == {
        "reference_latents_method": "index_timestep_zero"
    }
    registry = default_registry(entry_point_packs=False)
    exported = export_api(load_workflow(tmp_path / f"{TEMPLATE}.nodeloom.json", registry), registry)
    (method_node,) = [
        n for n in exported.values() if n["class_type"] == "FluxKontextMultiReferenceLatentMethod"
    ]
    assert method_node["inputs"]["reference_latents_method"] == "index_timestep_zero"  # and back to ComfyUI
    # 5 x 7 packed patches; the picture read by Qwen3-VL at 64 x 64 px and as a 48 x 32 px reference.
    sets = {
        "empty_latent_image_2.width": 40,
        "empty_latent_image_2.height": 56,
        "sampler_custom_advanced.steps": 3,
        "sampler_custom_advanced.seed": 42,
        "text_encode_qwen_image_edit_plus.vl_pixels": 64 * 64,
        "text_encode_qwen_image_edit_plus.vae_pixels": 48 * 32,
        "load_image.path": picture,
    }
    ours = run_graph(workflow, tmp_path / "files", sets, dirs)
    native = run_graph(native_graph(workflow, folder), tmp_path / "native", sets, dirs)
    assert native[0].std() > 5  # a real picture, not a flat one both could agree on by accident
    # The same float32 weights read from ComfyUI's files instead of the folder: identical, or 1/255 apart
    # where a value sits on a rounding edge.
    assert max_diff(ours, native) <= 1
    # Without the method node ComfyUI's Krea 2 reads no references: the same as no VAE (no references made).
    bypassed = json.loads(json.dumps(workflow))
    method = bypassed["nodes"].pop("flux_kontext_multi_reference_latent_meth")
    for node in bypassed["nodes"].values():
        for port, link in node.get("inputs", {}).items():
            if link[0] == "flux_kontext_multi_reference_latent_meth":
                node["inputs"][port] = method["inputs"]["conditioning"]
    no_method = run_graph(bypassed, tmp_path / "no_method", sets, dirs)
    no_vae = json.loads(json.dumps(bypassed))
    del no_vae["nodes"]["text_encode_qwen_image_edit_plus"]["inputs"]["vae"]
    assert max_diff(no_method, run_graph(no_vae, tmp_path / "no_vae", sets, dirs)) == 0


@torch.no_grad()
def test_taps_are_the_layers_inputs_as_comfyui_reads_them_deepstack_included() -> None:
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from pipelines.diffusion.krea2_pictures import _layer_inputs, qwen3vl_patches

    tiny = Path(__file__).resolve().parent.parent / "resources" / "configs" / "krea2-turbo-tiny"
    config = Qwen3VLConfig.from_pretrained(str(tiny / "text_encoder"))
    config.vision_config.depth = 2
    config.vision_config.deepstack_visual_indexes = [0, 1]  # features added after decoder layers 0 and 1
    torch.manual_seed(0)
    model = Qwen3VLModel(config).eval()
    pixels, grid = qwen3vl_patches(_picture(flip=False)[:, :, :48], config.vision_config.to_dict())
    pads = int(grid.prod()) // 4
    ids = torch.tensor([[1, 7, 3, *[5] * pads, 4, 8, 9]])
    picture = ids == 5
    taps = _layer_inputs(model, (1, 2, 3))
    try:
        states = model(
            input_ids=ids,
            pixel_values=pixels,
            image_grid_thw=grid,
            mm_token_type_ids=picture.long(),
            output_hidden_states=True,
        ).hidden_states
    finally:
        taps.close()
    deepstack = model.get_image_features(pixels, grid).deepstack_features  # per layer, per picture
    # ComfyUI's tap k is layer k's input: transformers' hidden_states[k] plus layer k-1's DeepStack feature at
    # the picture's tokens (the same addition, so exact), and the same everywhere else.
    for k in (1, 2):
        expected = states[k].clone()
        expected[picture] += deepstack[k - 1][0]
        assert torch.equal(taps.seen[k], expected)
        assert not torch.equal(taps.seen[k], states[k])
    assert 3 not in taps.seen  # the layer count: the final normed state, hidden_states[3], in both
