"""ComfyUI's LTX-2 LoRAs (the transformer's layers in the one-file checkpoint's names, `diffusion_model.*`)
read onto diffusers' LTX-2 transformer: the names (no model), and on `demo:tiny-ltx2` a LoRA changes the
sampled latents exactly as the same LoRA merged into the weights by hand does."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipelines.diffusion.lora_formats import read_lora

# ComfyUI's module name -> diffusers' (written out here, independently of the reader's rename tables).
LAYERS = {
    "patchify_proj": "proj_in",
    "adaln_single.linear": "time_embed.linear",
    "av_ca_a2v_gate_adaln_single.linear": "av_cross_attn_video_a2v_gate.linear",
    "transformer_blocks.0.attn1.to_q": "transformer_blocks.0.attn1.to_q",
    "transformer_blocks.0.audio_to_video_attn.to_v": "transformer_blocks.0.audio_to_video_attn.to_v",
    "transformer_blocks.1.ff.net.0.proj": "transformer_blocks.1.ff.net.0.proj",
}
RANK, ALPHA, STRENGTH = 2, 1.0, 0.5


@pytest.mark.slow  # no model, but its first diffusers imports take seconds when run alone
def test_comfy_ltx2_names_are_read_as_the_transformers_layers(tmp_path: Path) -> None:
    state = {}
    for i, module in enumerate(LAYERS):
        if i % 2:  # kohya's factor names, with an alpha
            state[f"diffusion_model.{module}.lora_down.weight"] = torch.ones(RANK, 4)
            state[f"diffusion_model.{module}.lora_up.weight"] = torch.ones(4, RANK)
            state[f"diffusion_model.{module}.alpha"] = torch.tensor(ALPHA)
        else:  # PEFT's
            state[f"diffusion_model.{module}.lora_A.weight"] = torch.ones(RANK, 4)
            state[f"diffusion_model.{module}.lora_B.weight"] = torch.ones(4, RANK)
    state["text_embedding_projection.video_aggregate_embed.lora_A.weight"] = torch.ones(RANK, 4)
    path = tmp_path / "ltx.safetensors"
    save_file(state, str(path))
    lora = read_lora(path, "ltx2")
    assert set(lora.targets["denoiser"]) == set(LAYERS.values())
    alphas = {m: w.alpha for m, w in lora.targets["denoiser"].items()}
    assert [alphas[LAYERS[m]] for m in LAYERS] == [None, ALPHA] * 3
    assert lora.unread == ["text_embedding_projection.video_aggregate_embed.lora_A.weight"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.demo_support import copy_demo_model

    return copy_demo_model("tiny-ltx2", tmp_path_factory.mktemp("ltx2-lora") / "tiny-ltx2")


def _comfy_lora(folder: Path, path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """A seeded ComfyUI-format LoRA of LAYERS; returns diffusers module -> (up, down)."""
    weights = load_file(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    gen = torch.Generator().manual_seed(3)
    state, factors = {}, {}
    for comfy, ours in LAYERS.items():
        out_features, in_features = weights[f"{ours}.weight"].shape
        down = torch.randn(RANK, in_features, generator=gen) * 0.3
        up = torch.randn(out_features, RANK, generator=gen) * 0.3
        state[f"diffusion_model.{comfy}.lora_A.weight"] = down
        state[f"diffusion_model.{comfy}.lora_B.weight"] = up
        state[f"diffusion_model.{comfy}.alpha"] = torch.tensor(ALPHA)
        factors[ours] = (up, down)
    save_file(state, str(path))
    return factors


def _merged_by_hand(folder: Path, factors: dict, out: Path) -> Path:
    shutil.copytree(folder, out)
    file = out / "transformer" / "diffusion_pytorch_model.safetensors"
    weights = load_file(str(file))
    for module, (up, down) in factors.items():
        weights[f"{module}.weight"] = weights[f"{module}.weight"] + STRENGTH * (ALPHA / RANK) * (up @ down)
    save_file(weights, str(file))
    return out


@pytest.mark.slow  # samples the tiny LTX-2 three times (~5 s)
def test_a_comfy_ltx2_lora_gives_the_latents_of_the_same_lora_merged_by_hand(
    folder: Path, tmp_path: Path
) -> None:
    from memory import MemoryConfig, MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.lora import make_patch
    from pipelines.diffusion.ltx2_nodes import empty_ltx2_latent
    from pipelines.diffusion.ltx2_sampling import sample_ltx2
    from pipelines.diffusion.sampling import SamplerSettings

    lora = tmp_path / "ltx-2-lora.safetensors"
    merged = _merged_by_hand(folder, _comfy_lora(folder, lora), tmp_path / "merged")
    # cfg 1: one transformer call a step; 2 steps, 64x32 px, 9 frames (the tiny VAE is 4x in space and time).
    settings = SamplerSettings(scheduler="default", steps=2, cfg=1.0, seed=42)

    def latents(model: Path, with_lora: bool) -> tuple[torch.Tensor, torch.Tensor]:
        config = MemoryConfig(device="cpu", policy="none", data_dir=tmp_path / f"mm-{model.name}-{with_lora}")
        with MemoryManager(config) as mm:
            loaded = load_model(mm, str(model))
            denoiser = loaded.denoiser
            if with_lora:
                patch = make_patch(lora, STRENGTH, ("denoiser",))
                denoiser = dataclasses.replace(denoiser, patches=(patch,))
            pos = encode_prompt(mm, loaded.text_encoder, "a yellow square")
            neg = encode_prompt(mm, loaded.text_encoder, "")  # the sound track is always guided
            empty = empty_ltx2_latent(loaded.vae, loaded.denoiser, 64, 32, 9, 24.0)
            out = sample_ltx2(mm, denoiser, pos, neg, empty, settings)
            return out.samples, out.audio

    base, base_audio = latents(folder, False)
    patched, patched_audio = latents(folder, True)
    by_hand, by_hand_audio = latents(merged, False)
    assert (patched - base).abs().max() > 1e-2  # the LoRA changes the video latents
    assert (
        patched_audio - base_audio
    ).abs().max() > 1e-3  # and, through the cross-modal attention, the sound's
    # The same float32 weights up to the order of one addition (W + s * BA either way): rounding only.
    torch.testing.assert_close(patched, by_hand, rtol=0, atol=1e-5)
    torch.testing.assert_close(patched_audio, by_hand_audio, rtol=0, atol=1e-5)
