"""The Wan 2.2 VAE in ComfyUI's names (`wan2.2_vae.safetensors`): written and read back, it decodes the same.

The tiny TI2V demo's VAE (`AutoencoderKLWan(is_residual=True)`, the Wan 2.2 layout) goes to the original
Wan 2.2 names with `keys.vae_from_diffusers` and back with `keys.vae_to_diffusers`; a fresh VAE loaded
strictly from the read-back state decodes a latent exactly as the demo's does. The names are checked
against the original layout (nested `downsamples.I.downsamples.J`, the resample after a stage's resnets).
"""

from __future__ import annotations

import torch
from diffusers import AutoencoderKLWan

from pipelines.diffusion.comfy_layouts.keys import vae_from_diffusers, vae_to_diffusers
from pipelines.diffusion.demo_wan_ti2v import TINY_WAN22_VAE


def _vae() -> AutoencoderKLWan:
    torch.manual_seed(0)
    return AutoencoderKLWan(**TINY_WAN22_VAE).eval()


def test_names_are_the_original_wan22_layout() -> None:
    vae = _vae()
    comfy = vae_from_diffusers("wan", vae.state_dict(), dict(vae.config))
    assert len(comfy) == len(vae.state_dict())  # one name each, none lost
    names = set(comfy)
    resnets = TINY_WAN22_VAE.get("num_res_blocks", 2)
    # Stage 0 of the encoder: its resnets, then its resample (2D down: a padded conv, `resample.1`).
    assert "encoder.downsamples.0.downsamples.0.residual.0.gamma" in names
    assert f"encoder.downsamples.0.downsamples.{resnets}.resample.1.weight" in names
    # Decoder stages have one resnet more (diffusers' `num_res_blocks + 1`), then the upsample.
    assert f"decoder.upsamples.0.upsamples.{resnets + 1}.resample.1.weight" in names
    assert {"encoder.conv1.weight", "decoder.head.2.weight", "conv1.weight", "conv2.weight"} <= names
    assert not any("down_blocks" in n or "up_blocks" in n or "resnets" in n for n in names)


def test_written_and_read_back_decodes_the_same() -> None:
    vae = _vae()
    comfy = vae_from_diffusers("wan", vae.state_dict(), dict(vae.config))
    back = vae_to_diffusers("wan", comfy, dict(vae.config), list(vae.state_dict()))
    fresh = AutoencoderKLWan(**TINY_WAN22_VAE).eval()
    fresh.load_state_dict(back, strict=True)
    latent = torch.randn(1, vae.config.z_dim, 2, 4, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = vae.decode(latent).sample, fresh.decode(latent).sample
    assert torch.equal(a, b)  # the same weights in the same module: the same kernels, bit for bit
