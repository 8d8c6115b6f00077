"""MiniMax H3's ComfyUI files: the key maps round-trip, the files are detected as MiniMax H3 from their tensors,
the pruned (curve-form) transformer's time embedding is ComfyUI's, the released configs fit released-size headers, and
ComfyUI's MiniMax H3 text-to-video, image-to-video and reference-to-video (two pictures) templates run from tiny files under the templates' own
names (`--models-dir`) with the frames and sound of the same graph on the diffusers folder.

The tiny files are `demo:tiny-minimax` written by `comfy_layouts.minimax.write_minimax_files` (plain float
tensors under the released names: the int8_convrot / nvfp4 quantizations are read by the shared ComfyUI
tensor reader, not here): the transformer under the templates' pruned name in the curve form (its table the
tiny time embedding sampled at 1025 points) and unpruned as `minimax_h3_fl2va_bf16.safetensors`, the text
encoder cut after layer 50 as ComfyUI's Qwen3-VL-32B file is.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.diffusion.comfy_layouts import minimax
from pipelines.diffusion.comfy_layouts.variants import RESOURCES_DIR

TINY = RESOURCES_DIR / "configs" / "minimax-tiny"


def _tiny(cls_name: str, sub: str) -> torch.nn.Module:
    import diffusers

    cls = getattr(diffusers, cls_name)
    torch.manual_seed(0)
    return cls.from_config(cls.load_config(str(TINY / sub)))


@pytest.mark.slow  # builds the tiny transformer and VAE (~1 s once diffusers is imported)
def test_the_transformer_and_video_vae_names_round_trip_exactly() -> None:
    transformer = _tiny("MiniMaxH3Transformer3DModel", "transformer")
    state = transformer.state_dict()
    comfy = minimax.transformer_from_diffusers(state, transformer.config)
    # ComfyUI's (the original's) names: what comfy/ldm/minimax/model.py loads
    assert {"blocks.0.attn.qkv_proj.weight", "video_patch_proj.weight", "rope.inv_freq"} <= set(comfy)
    back = minimax.transformer_to_diffusers(comfy)
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)

    vae = _tiny("AutoencoderKLMiniMaxH3", "vae")
    state = vae.state_dict()
    comfy = minimax.video_vae_from_diffusers(state, vae.config)
    assert {"decoder.x_embedder.weight", "encoder.down.0.block.0.conv1.weight", "latents_mean"} <= set(comfy)
    assert "decoder.transformer_blocks.0.attn.to_qkv.weight" in comfy
    back = minimax.video_vae_to_diffusers(comfy, vae.config)
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)


@pytest.mark.slow  # builds the tiny audio VAE
def test_the_audio_vae_with_weight_norms_folded_gives_the_same_weights() -> None:
    vae = _tiny("AutoencoderKLMiniMaxH3Audio", "audio_vae")
    state = vae.state_dict()
    comfy = minimax.audio_vae_from_diffusers(state, vae.config)
    assert not any(k.endswith(("weight_g", "weight_v")) for k in comfy)  # folded, as ComfyUI stores them
    back = minimax.audio_vae_to_diffusers(comfy, list(state))
    assert set(back) == set(state)
    for key in (k for k in state if k.endswith(".weight_v")):
        base = key.removesuffix("_v")
        ours = torch._weight_norm(back[key], back[base + "_g"], 0)
        # v * (g / |v|) with g = |v|: the file's weight within float32 rounding (torch's weight-norm kernel sums
        # the norm in another order than norm_except_dim: 2.4e-7 seen)
        theirs = torch._weight_norm(state[key], state[base + "_g"], 0)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


# Names from ComfyUI's files (comfy/ldm/minimax, and the markers comfy/sd.py detects them by), a few of each.
_TRANSFORMER = ["video_patch_proj.weight", "audio_patch_proj.weight", "condition_proj.weight",
                "blocks.0.attn.qkv_proj.weight", "token_refiner.blocks.0.mlp.fc1.weight", "rope.inv_freq"]  # fmt: skip
_VIDEO_VAE = ["encoder.down.5.block.0.conv1.weight", "decoder.transformer_blocks.0.scale1",
              "decoder.x_embedder.weight", "latents_mean"]  # fmt: skip
_AUDIO_VAE = ["pre_block.attn.zero_k_bias", "decoder.conv_pre.weight", "latents_std"]


def test_family_detection_from_tensors_picks_minimax_for_every_file() -> None:
    from pipelines.diffusion.comfy_layouts.loaders import denoiser_layout
    from pipelines.diffusion.comfy_layouts.text_encoders import TEXT_ENCODER_FAMILIES, text_encoder_kind
    from pipelines.diffusion.family_detect import family_from_keys

    diffusers_names = [
        "proj_in.weight",
        "audio_proj_in.weight",
        "token_refiner.refiner_blocks.0.norm1.weight",
    ]
    for keys in (_TRANSFORMER, diffusers_names, _VIDEO_VAE, _AUDIO_VAE):
        assert family_from_keys(keys, {}) == "minimax"
    assert denoiser_layout(_TRANSFORMER) == ("minimax", "comfy")
    assert denoiser_layout(["model.diffusion_model." + k for k in _TRANSFORMER]) == ("minimax", "comfy")
    assert denoiser_layout(diffusers_names) == ("minimax", "diffusers")
    assert (minimax.vae_kind(_VIDEO_VAE), minimax.vae_kind(_AUDIO_VAE)) == ("video", "audio")
    assert minimax.transformer_names(_VIDEO_VAE) is None and minimax.vae_kind(_TRANSFORMER) is None
    # ComfyUI's Qwen3-VL files (model.layers.*, visual.*) serve MiniMax H3 and Qwen-Image 2.1; shapes decide
    qwen3vl = ["model.layers.0.self_attn.q_norm.weight", "visual.blocks.0.norm1.weight"]
    assert text_encoder_kind(qwen3vl) == "qwen3-vl" and "minimax" in TEXT_ENCODER_FAMILIES["qwen3-vl"]


def test_the_curve_forms_time_embedding_interpolates_its_table_as_comfyui_does() -> None:
    """ComfyUI's curve form (comfy/ldm/minimax/model.py): t in [0, 1] -> position t * (grid - 1), the two rows
    around it blended by the fraction, t clamped to [0, 1], t = 1 on the last interval."""
    from pipelines.diffusion.comfy_layouts.minimax_load import CurveTimeEmbedding

    curve = CurveTimeEmbedding(5, 2)
    with torch.no_grad():
        curve.table.copy_(torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]))
    rows = curve(torch.tensor([0.0, 0.25, 0.375, 1.0, 1.5, -0.5]))
    expected = torch.tensor([[0.0, 1.0], [2.0, 3.0], [3.0, 4.0], [8.0, 9.0], [8.0, 9.0], [0.0, 1.0]])
    assert torch.equal(rows, expected)  # exact: halves and integers


@pytest.mark.slow  # builds the 33B transformer, both VAEs and Qwen3-VL-32B to layer 50 on the meta device
def test_released_size_headers_pick_the_shipped_minimax_h3_configs() -> None:
    """ComfyUI-named transformer and VAE states of the released size fit `minimax-h3` (the tiny one does not);
    the text encoder config builds Qwen3-VL-32B with 50 decoder layers and the 5120-wide states H3 reads."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLMiniMaxH3, MiniMaxH3Transformer3DModel
    from transformers import Qwen3VLForConditionalGeneration

    from pipelines.diffusion.assembly import read_json
    from pipelines.diffusion.comfy_layouts.variants import fits, module_shapes, variants_for
    from pipelines.quant.split import module_factory

    [released] = [v for v in variants_for(["minimax"]) if v.name == "minimax-h3"]
    config = read_json(released.folder / "transformer" / "config.json")
    with init_empty_weights():
        model = MiniMaxH3Transformer3DModel.from_config(config)
        vae = AutoencoderKLMiniMaxH3.from_config(read_json(released.folder / "vae" / "config.json"))
    comfy = minimax.transformer_from_diffusers(model.state_dict(), model.config)
    assert tuple(comfy["blocks.49.attn.qkv_proj.weight"].shape) == (3 * 56 * 128, 5376)
    shapes = {k: tuple(v.shape) for k, v in minimax.transformer_to_diffusers(comfy).items()}
    assert fits(shapes, module_shapes(lambda: MiniMaxH3Transformer3DModel.from_config(config)))
    tiny = read_json(TINY / "transformer" / "config.json")
    assert not fits(shapes, module_shapes(lambda: MiniMaxH3Transformer3DModel.from_config(tiny)))
    video = minimax.video_vae_to_diffusers(
        minimax.video_vae_from_diffusers(vae.state_dict(), vae.config), vae.config
    )
    assert fits({k: tuple(v.shape) for k, v in video.items()}, module_shapes(lambda: vae))
    text = module_shapes(module_factory(Qwen3VLForConditionalGeneration, released.folder / "text_encoder"))
    assert "model.language_model.layers.49.mlp.down_proj.weight" in text
    assert "model.language_model.layers.50.mlp.down_proj.weight" not in text
    assert text["model.visual.merger.linear_fc2.weight"][0] == 5120  # the DiT's text_dim


# --- the templates, run from the files ------------------------------------------------------------------

_SIZE = {  # the smallest video the pipeline makes (5 s at 24 fps), 32 x 32 px, 1 step
    "mini_max_h3_image_to_video.width": 32,
    "mini_max_h3_image_to_video.height": 32,
    "mini_max_h3_image_to_video.frames": 124,
    "sampler_custom_advanced.steps": 1,
    "save_video.format": "png",
}
TEMPLATES = ("video_minimax_h3_t2v", "video_minimax_h3_i2v", "video_minimax_h3_r2v")
_NODE = {"video_minimax_h3_r2v": "mini_max_h3_reference_to_video"}  # the latent node, if not Image to Video
# The transformer file each template loads (r2v: the ref2va partition, from the folder's transformer_ref)
_TRANSFORMER_ROLE = {"video_minimax_h3_r2v": "ref2va"}


@pytest.fixture(scope="module")
def comfy_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny diffusers folder, a ComfyUI root with its files under models/), built once."""
    from pipelines.diffusion.demo_models import save_demo_model
    from tests.template_runs import place_pictures

    pytest.importorskip("comfyui_workflow_templates_json")
    tmp = tmp_path_factory.mktemp("minimax_comfy")
    folder = save_demo_model("tiny-minimax", tmp / "tiny-minimax")
    root = tmp / "ComfyUI"
    minimax.write_minimax_files(folder, root / "models")
    place_pictures("video_minimax_h3_i2v", root, size=(60, 40))
    place_pictures("video_minimax_h3_r2v", root, size=(60, 40))  # 'match' sizes them to 32 x 32
    return folder, root


def _on_the_folder(workflow: dict, folder: Path) -> dict:
    """The imported template with its four file loaders (transformer, text encoder, video and audio VAE)
    replaced by one Load Model node reading the diffusers folder (its VAE carries the audio VAE)."""
    graph = json.loads(json.dumps(workflow))
    nodes = graph["nodes"]
    loaders = [k for k, n in nodes.items() if n["type"] in ("LoadDenoiser", "LoadTextEncoder", "LoadVAE")]
    assert len(loaders) == 4, loaders
    for k in loaders:
        del nodes[k]
        graph.get("ui", {}).get("nodes", {}).pop(k, None)
    nodes["native_load"] = {"type": "LoadDiffusionModel", "params": {"path": str(folder)}, "inputs": {}}
    for node in nodes.values():
        for port, link in node.get("inputs", {}).items():
            if isinstance(link, list) and link and link[0] in loaders:
                node["inputs"][port] = ["native_load", link[1]]
    return graph


@pytest.mark.slow  # builds the tiny models once; per template two tiny video runs
def test_the_audio_vae_file_decodes_the_folders_sound(comfy_root: tuple[Path, Path], cpu_memory) -> None:
    """VAE Decode Audio's input in the templates: the audio VAE file alone decodes a sound-track latent to the
    folder's waveform, and the video VAE file's value knows the sound track's shape (its channels)."""
    from pipelines.diffusion.loading import load_diffusers_folder
    from pipelines.diffusion.minimax_vae import decode_minimax_audio, geometry_of
    from pipelines.quant.split_files import load_vae_file

    folder, root = comfy_root
    audio, message = load_vae_file(cpu_memory, root / "models" / "vae" / minimax.MINIMAX_FILES["audio_vae"])
    assert "MiniMax H3 audio VAE" in message and audio.audio is not None
    video, _ = load_vae_file(cpu_memory, root / "models" / "vae" / minimax.MINIMAX_FILES["vae_int8"])
    assert geometry_of(video, None).audio_channels == 8  # the tiny audio VAE's latent channels
    with pytest.raises(ValueError, match="this is MiniMax H3's audio VAE"):
        geometry_of(audio, None)
    native = load_diffusers_folder(cpu_memory, folder).vae
    latent = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(3))
    ours, theirs = (
        decode_minimax_audio(cpu_memory, audio.audio, latent),
        decode_minimax_audio(cpu_memory, native.audio, latent),
    )
    assert ours.sample_rate == theirs.sample_rate and theirs.waveform.abs().max() > 1e-3
    # the folded weight norms give the folder's weights within a float32 rounding (2.4e-7): 1e-5 on samples
    torch.testing.assert_close(ours.waveform, theirs.waveform, rtol=0, atol=1e-5)


@pytest.mark.slow  # loads two tiny transformers
def test_the_transformer_files_fill_the_folders_module(comfy_root: tuple[Path, Path], cpu_memory) -> None:
    """The unpruned file gives the folder's transformer weight for weight; the pruned one diffusers' module with
    the curve's table as its time embedding (and the same weights elsewhere)."""
    from diffusers import MiniMaxH3Transformer3DModel

    from pipelines.diffusion.comfy_layouts.loaders import load_comfy_denoiser
    from pipelines.diffusion.comfy_layouts.minimax_load import CurveTimeEmbedding
    from pipelines.diffusion.minimax_sampling import AUDIO_SCHEDULER_KEY

    folder, root = comfy_root
    native = MiniMaxH3Transformer3DModel.from_pretrained(str(folder), subfolder="transformer").state_dict()
    for role in ("unpruned", "transformer"):
        ref, message = load_comfy_denoiser(
            cpu_memory, root / "models" / "diffusion_models" / minimax.MINIMAX_FILES[role]
        )
        assert "MiniMax H3 transformer (comfy names" in message
        assert ref.scheduler_config[AUDIO_SCHEDULER_KEY]["shift"] == 3.0  # the audio rows' own schedule
        with cpu_memory.use(ref.handle) as model:
            ours = {k: v.detach().clone() for k, v in model.state_dict().items()}
            curve = isinstance(model.time_embedder, CurveTimeEmbedding)
        assert curve == (role == "transformer")
        same = [k for k in native if not k.startswith("time_embedder.")]
        assert all(torch.equal(ours[k], native[k]) for k in same)
        if not curve:
            assert set(ours) == set(native) and all(torch.equal(ours[k], native[k]) for k in native)

    # ComfyUI's fp8 "scaled" form of the same file: read dequantized (weight * its scale), the names as above
    from safetensors.torch import load_file, save_file

    from pipelines.diffusion.comfy_layouts.scaled_fp8 import dequantize_stubs, scaled_fp8_state

    scaled = scaled_fp8_state(
        load_file(str(root / "models" / "diffusion_models" / minimax.MINIMAX_FILES["unpruned"]))
    )
    path = root / "models" / "diffusion_models" / "minimax_h3_fl2va_fp8_scaled.safetensors"
    save_file(scaled, str(path))
    expected = minimax.transformer_to_diffusers(dequantize_stubs(scaled))
    ref, message = load_comfy_denoiser(cpu_memory, path)
    assert "float8_e4m3fn" in message and "dequantized" in message
    with cpu_memory.use(ref.handle) as model:
        assert all(torch.equal(v, expected[k].float()) for k, v in model.state_dict().items())


@pytest.mark.slow  # two tiny video runs per template
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_template_on_its_own_file_names_gives_the_folders_video(
    template: str, comfy_root: tuple[Path, Path], tmp_path: Path
) -> None:
    from app.main import main
    from tests.comfy_layout_support import run_graph
    from tests.template_runs import template_file

    folder, root = comfy_root
    dirs = ("--models-dir", str(root / "models"))
    imported = tmp_path / f"{template}.nodeloom.json"
    # `app check` of ComfyUI's file against these files (it skips the i2v template's unfed helper node, as a
    # run does; a check of the imported file would name it)
    assert main(["check", str(template_file(template)), *dirs]) == 0
    assert main(["import", str(template_file(template)), "-o", str(imported), *dirs]) == 0
    workflow = json.loads(imported.read_text(encoding="utf-8"))
    paths = {n["params"]["path"] for n in workflow["nodes"].values() if n["type"].startswith("Load")}
    role = _TRANSFORMER_ROLE.get(template, "transformer")
    assert {minimax.MINIMAX_FILES[r] for r in (role, "text_encoder", "vae_int8", "audio_vae")} <= paths
    node = _NODE.get(template, "mini_max_h3_image_to_video")
    size = {k.replace("mini_max_h3_image_to_video", node): v for k, v in _SIZE.items()}
    ours = run_graph(imported, tmp_path / "files", size, dirs)
    native = run_graph(_on_the_folder(workflow, folder), tmp_path / "folder", size, dirs)
    assert len(ours) == len(native) == 124 and native[0].std() > 5
    # The same float32 weights read from ComfyUI's files: 1 of 255 where a value sits on a rounding edge (one
    # pixel of 570k seen in the t2v run).
    assert (
        max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(ours, native, strict=True)) <= 1
    )


@pytest.mark.slow  # builds the tiny demo once (~2 s)
def test_the_shipped_minimax_config_folders_are_what_their_writers_write(tmp_path: Path) -> None:
    """resources/configs/minimax-tiny and minimax-h3 are `minimax_load`'s output: refresh them with
    `python -m pipelines.diffusion.comfy_layouts.minimax_load`."""
    from pipelines.diffusion.comfy_layouts.minimax_load import (
        write_minimax_released,
        write_minimax_tiny_config,
    )
    from tests.comfy_layout_support import config_content

    for fresh in (write_minimax_tiny_config(tmp_path / "work", tmp_path), write_minimax_released(tmp_path)):
        shipped = RESOURCES_DIR / "configs" / fresh.name
        files = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file())
        assert all(config_content(fresh / rel) == config_content(shipped / rel) for rel in files), fresh.name


@pytest.mark.slow  # quantizes the tiny files and loads them (no run)
def test_the_released_quantized_forms_load_as_their_dequantized_weights(
    comfy_root: tuple[Path, Path], tmp_path: Path, cpu_memory
) -> None:
    """The templates' files as released: the transformer's blocks in int8 ConvRot, Qwen3-VL in NVFP4 with AWQ
    scales, the video VAE's decoder in int8 ConvRot (`comfy_quant`, written by `quant_writer`); each loads as
    the weights those forms read back to, under diffusers' names (the shared ComfyUI reader dequantizes)."""
    from safetensors.torch import load_file, save_file

    from pipelines.diffusion.comfy_layouts.loaders import load_comfy_denoiser
    from pipelines.diffusion.comfy_layouts.minimax_load import load_minimax_vae
    from pipelines.diffusion.comfy_layouts.quant_writer import comfy_quant_state, fake_quantized
    from pipelines.diffusion.comfy_layouts.text_encoders import load_comfy_text_encoder

    _, root = comfy_root
    models = root / "models"

    def quantized(sub: str, role: str, fmt: str, **kwargs: object) -> tuple[Path, dict]:
        src = load_file(str(models / sub / minimax.MINIMAX_FILES[role]))
        path = tmp_path / sub / minimax.MINIMAX_FILES[role]
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(comfy_quant_state(src, fmt, **kwargs), str(path))
        return path, fake_quantized(src, fmt, **kwargs)

    def loaded(handle: object) -> dict[str, torch.Tensor]:
        with cpu_memory.use(handle) as model:
            return {k: v.detach().clone() for k, v in model.state_dict().items()}

    blocks = {"select": lambda k: k.startswith("blocks.")}  # ComfyUI's files quantize the 50 blocks
    path, expected = quantized("diffusion_models", "transformer", "int8_convrot", **blocks)
    ref, message = load_comfy_denoiser(cpu_memory, path)
    ours, want = loaded(ref.handle), minimax.transformer_to_diffusers(expected)
    assert "int8" in message and "transformer_blocks.0.attn.to_k.weight" in want
    assert all(torch.equal(ours[k], want[k].float()) for k in want)

    awq = {"awq": lambda k: k.endswith("mlp.down_proj.weight")}
    path, expected = quantized("text_encoders", "text_encoder", "nvfp4", **awq)
    ref, message = load_comfy_text_encoder(cpu_memory, path, family="minimax")
    ours = loaded(ref.handles[0])
    assert "for MiniMax H3" in message
    for name in ("model.layers.3.mlp.down_proj.weight", "model.layers.49.self_attn.q_proj.weight"):
        assert torch.equal(ours[name.replace("model.", "model.language_model.", 1)], expected[name].float())

    decoder = {"select": lambda k: k.startswith("decoder.transformer_blocks.")}
    path, expected = quantized("vae", "vae_int8", "int8_convrot", **decoder)
    ref, _ = load_minimax_vae(cpu_memory, path)
    config = {k: v for k, v in ref.config.items() if not k.startswith("_")}
    ours, want = loaded(ref.handle), minimax.video_vae_to_diffusers(expected, config)
    assert all(torch.equal(ours[k], want[k].float()) for k in want)
