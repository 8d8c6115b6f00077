"""Split model files through LoadDenoiser / LoadTextEncoder / LoadVAE, and GGUF denoisers kept quantized.

The tiny Flux split set (pipelines/quant/demo_split.py) is cut from the `demo:tiny-flux` folder in the
layouts the public releases use, so the split workflow must load bit for bit the folder's weights, and
give the folder's picture: bit for bit once both sets of weights sit at the same alignment, within float32
rounding as loaded (memory-mapped weights sit at other addresses, which vectorised kernels round
differently). GGUF and fp8 files give pictures close to
float32: their PSNR is printed and bounded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memory import MemoryConfig, MemoryManager
from nodes.executor import Executor
from nodes.workflow import workflow_from_dict
from pipelines.diffusion.families import UnsupportedModelError
from pipelines.quant.demo_split import ensure_split_demo
from pipelines.quant.gguf_files import gguf_block_bytes, write_gguf_denoiser
from pipelines.quant.layouts import flux_diffusers_to_bfl
from pipelines.quant.split_files import load_denoiser_file, load_text_encoder_files, load_vae_file

# Integration and parity: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

WORKFLOWS = Path(__file__).resolve().parent.parent / "resources" / "workflows"


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = torch.mean((a.float() - b.float()) ** 2).item()
    return float("inf") if mse == 0 else 10 * torch.log10(torch.tensor(1.0 / mse)).item()


def run(registry, name: str, out: Path, **params: object) -> tuple[torch.Tensor, MemoryManager]:
    data = json.loads((WORKFLOWS / name).read_text())
    data["nodes"]["sampler"]["params"].update(steps=4, preview_every=0)
    for key, value in params.items():
        node, param = key.split("__")
        data["nodes"][node]["params"][param] = value
    mm = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    result = Executor(registry, memory=mm).run(workflow_from_dict(data, registry), out_dir=out)
    assert result.ok, result.error
    return result.outputs["decode"]["image"], mm


def _workflow(registry, name: str):  # noqa: ANN001, ANN202
    data = json.loads((WORKFLOWS / name).read_text())
    data["nodes"]["sampler"]["params"].update(steps=4, preview_every=0)
    return workflow_from_dict(data, registry)


def _realign(module: torch.nn.Module) -> None:
    """Every weight copied into memory of its own. Loaded weights are views into memory-mapped files, at
    whatever address the file's layout gives (4-byte aligned here); a fresh tensor is 64-byte aligned."""
    for mod in module.modules():
        for attr, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[attr] = torch.nn.Parameter(p.detach().clone(), requires_grad=False)
        for attr, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[attr] = b.clone()


def _pictures(registry, name: str, out: Path) -> tuple[torch.Tensor, torch.Tensor, dict]:  # noqa: ANN001
    """(the picture as loaded, the picture with every weight realigned, each component's weights)."""
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:  # none: loaded models stay
        loaded = Executor(registry, memory=mm).run(_workflow(registry, name), out_dir=out / "loaded")
        assert loaded.ok, loaded.error
        weights = {}
        for handle in list(mm.ledger.handles.values()):
            with mm.use(handle) as module:
                weights[handle.spec.name] = {k: v.detach().clone() for k, v in module.state_dict().items()}
                _realign(module)
        # A fresh executor (no cached outputs) on the same manager: the same modules, weights moved.
        moved = Executor(registry, memory=mm).run(_workflow(registry, name), out_dir=out / "moved")
        assert moved.ok, moved.error
    return loaded.outputs["decode"]["image"], moved.outputs["decode"]["image"], weights


def test_split_files_load_the_folders_weights_and_give_its_picture(registry, tmp_path: Path) -> None:
    folder_image, folder_moved, folder_weights = _pictures(registry, "txt2img_flux.json", tmp_path / "folder")
    split_image, split_moved, split_weights = _pictures(
        registry, "txt2img_flux_split.json", tmp_path / "split"
    )
    assert set(split_weights) == {"transformer", "text_encoder", "text_encoder_2", "vae"}
    assert set(split_weights) == set(folder_weights)
    # The layouts' conversion (fused q/k/v and linear1 split, the final norm's halves swapped) is exact:
    # the same names and bit-identical tensors, whatever the CPU.
    for name, weights in split_weights.items():
        assert weights.keys() == folder_weights[name].keys(), name
        different = [k for k, t in weights.items() if not torch.equal(t, folder_weights[name][k])]
        assert not different, (name, different[:5])
    # The same kernels on the same tensors at the same alignment give the same picture, bit for bit.
    assert torch.equal(split_moved, folder_moved)
    # As loaded, the weights are views into two different files' mappings, at other addresses mod 64, and
    # vectorised kernels peel loops by alignment, which changes float32 summation order: 1.7e-6 apart on
    # an AVX-512 EPYC, not bit-equal on an AVX2 one either. That rounding (~1e-7 relative per op, over 4
    # steps and the VAE) stays far below one 8-bit level of the saved picture (1/255 of the [0, 1] range);
    # a wrong weight or a skipped step moves pixels by 0.1 and more.
    assert split_image.shape == folder_image.shape
    assert float((split_image - folder_image).abs().max()) < 1 / 255


def test_the_split_files_use_the_release_layouts() -> None:
    from safetensors import safe_open

    folder = ensure_split_demo()
    keys = {}
    for name in ("flux1-tiny.safetensors", "clip_l.safetensors", "t5xxl.safetensors", "ae.safetensors"):
        with safe_open(str(folder / name), framework="pt") as f:
            keys[name] = set(f.keys())
    assert "double_blocks.0.img_attn.qkv.weight" in keys["flux1-tiny.safetensors"]
    assert "single_blocks.0.linear1.weight" in keys["flux1-tiny.safetensors"]
    assert "text_model.encoder.layers.0.self_attn.q_proj.weight" in keys["clip_l.safetensors"]
    assert "encoder.block.0.layer.0.SelfAttention.q.weight" in keys["t5xxl.safetensors"]
    assert "encoder.down.0.block.0.conv1.weight" in keys["ae.safetensors"]


def test_loaders_say_what_they_detected_and_refuse_mismatches() -> None:
    folder = ensure_split_demo()
    config = folder / "config"
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        ref, message = load_denoiser_file(mm, folder / "flux1-tiny.safetensors", config_dir=config)
        assert ref.family.name == "flux" and "Flux transformer (dev, BFL layout)" in message
        te, message = load_text_encoder_files(
            mm, [folder / "t5xxl.safetensors", folder / "clip_l.safetensors"], config_dir=config
        )
        # Given in either order, CLIP goes to text_encoder and T5 to text_encoder_2.
        assert te.family.name == "flux" and [h.spec.name for h in te.handles] == [
            "text_encoder",
            "text_encoder_2",
        ]
        assert "T5 encoder" in message and "CLIP" in message
        with pytest.raises(UnsupportedModelError, match="is Flux"):
            load_denoiser_file(mm, folder / "flux1-tiny.safetensors", family="sdxl", config_dir=config)
        with pytest.raises(UnsupportedModelError, match="Load VAE"):
            load_denoiser_file(mm, folder / "ae.safetensors", config_dir=config)
        with pytest.raises(UnsupportedModelError, match="match no family"):
            load_text_encoder_files(mm, [folder / "t5xxl.safetensors"] * 2, config_dir=config)
        vae, message = load_vae_file(mm, folder / "ae.safetensors", family="flux", config_dir=config)
        assert vae.family.name == "flux"
        # The shipped Flux config is FLUX.1-dev's size: a tiny file says which fields differ.
        with pytest.raises(UnsupportedModelError, match="config_dir"):
            load_denoiser_file(mm, folder / "flux1-tiny.safetensors")


@pytest.mark.parametrize(
    "name", ["flux1-tiny-Q8_0.gguf", "flux1-tiny-Q4_0.gguf", "flux1-tiny-fp8_e4m3fn.safetensors"]
)
def test_quantized_transformer_files_run_close_to_float32(registry, tmp_path: Path, name: str) -> None:
    reference, mm = run(registry, "txt2img_flux_split.json", tmp_path / "ref")
    mm.close()
    path = f"demo:tiny-flux-split/{name}"
    image, mm = run(registry, "txt2img_flux_split.json", tmp_path / "q", transformer__path=path)
    with mm:
        handle = next(h for h in mm.ledger.handles.values() if h.spec.name == "transformer")
        if name.endswith(".gguf"):
            # Kept quantized: the ledger's bytes are the file's blocks (non-quantized tensors are F32 there).
            assert handle.spec.storage == "gguf"
            assert handle.weight_bytes == sum(gguf_block_bytes(ensure_split_demo() / name).values())
    figure = psnr(image, reference)
    print(f"{name}: PSNR vs float32 {figure:.1f} dB")
    assert figure >= {"Q8_0": 35.0, "Q4_0": 20.0}.get(name.split("-")[-1].removesuffix(".gguf"), 25.0)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_1"])
def test_k_quant_gguf_flux_stays_quantized_and_close(tmp_path: Path, qtype: str) -> None:
    from diffusers import FluxTransformer2DModel

    # K-quants pack 256 values per block: a Flux-shaped transformer 256 wide.
    torch.manual_seed(0)
    config = dict(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=32,
        num_attention_heads=8, joint_attention_dim=256, pooled_projection_dim=256, guidance_embeds=False,
        axes_dims_rope=(4, 14, 14),
    )  # fmt: skip
    model = FluxTransformer2DModel(**config).eval()
    (tmp_path / "config" / "transformer").mkdir(parents=True)
    (tmp_path / "config" / "transformer" / "config.json").write_text(json.dumps(dict(model.config)))
    (tmp_path / "config" / "scheduler").mkdir()
    (tmp_path / "config" / "scheduler" / "scheduler_config.json").write_text("{}")
    path = write_gguf_denoiser(
        flux_diffusers_to_bfl(model.state_dict()), tmp_path / f"t-{qtype}.gguf", qtype, arch="flux"
    )
    inputs = dict(
        hidden_states=torch.randn(1, 16, 16),
        encoder_hidden_states=torch.randn(1, 8, 256),
        pooled_projections=torch.randn(1, 256),
        timestep=torch.tensor([0.5]),
        img_ids=torch.zeros(16, 3),
        txt_ids=torch.zeros(8, 3),
    )
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm, torch.no_grad():
        ref, message = load_denoiser_file(mm, path, config_dir=tmp_path / "config")
        assert "GGUF kept quantized" in message
        with mm.use(ref.handle) as quantized:
            out = quantized(**inputs).sample
            weight = quantized.transformer_blocks[0].attn.to_q.weight
            assert weight.dtype == torch.uint8 and weight.quant_type.name == qtype
            assert ref.handle.weight_bytes == sum(gguf_block_bytes(path).values())
            assert ref.handle.weight_bytes < 0.25 * sum(p.numel() * 4 for p in model.parameters())
        expected = model(**inputs).sample
    relative = ((out - expected).norm() / expected.norm()).item()
    print(f"{qtype}: relative error of the transformer output {relative:.4f}")
    assert relative < 0.1


def test_8bit_storage_through_the_split_loaders(tmp_path: Path) -> None:
    folder = ensure_split_demo()
    config = folder / "config"
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
        full, _ = load_denoiser_file(mm, folder / "flux1-tiny.safetensors", config_dir=config)
        with mm.use(full.handle):
            pass  # a BFL-layout file's bytes are known once built (its names differ from the module's)
        for storage in ("fp8_e4m3fn", "fp8_e5m2", "int8"):
            ref, _ = load_denoiser_file(
                mm, folder / "flux1-tiny.safetensors", dtype=storage, config_dir=config
            )
            with mm.use(ref.handle) as module:
                stored = sum(t.numel() * t.element_size() for t in module.state_dict().values())
                assert ref.handle.weight_bytes == stored
            assert ref.handle.weight_bytes < 0.5 * full.handle.weight_bytes
        te, _ = load_text_encoder_files(
            mm, [folder / "clip_l.safetensors", folder / "t5xxl.safetensors"], dtype="int8", config_dir=config
        )
        for handle in te.handles:
            with mm.use(handle) as module:
                assert any(p.dtype == torch.int8 for p in module.parameters())
