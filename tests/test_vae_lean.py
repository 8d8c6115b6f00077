"""The lean VAE decode: banded convs and upsamples, in-place SiLU, the same picture as the plain decode."""

from __future__ import annotations

import pytest
import torch

from pipelines.diffusion import vae_lean
from pipelines.diffusion.vae_lean import lean_decoder


def _tiny_vae() -> torch.nn.Module:
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    vae = AutoencoderKL(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4,
        norm_num_groups=4,
        layers_per_block=1,
    )
    return vae.eval()


@pytest.mark.slow  # builds a diffusers VAE (imports diffusers, ~1 s)
@pytest.mark.parametrize("storage", ["float32", "int8"])
def test_lean_decode_gives_the_plain_decodes_picture_in_several_bands(storage: str, monkeypatch) -> None:
    vae = _tiny_vae()
    if storage == "int8":  # layers with hooks keep them: a band calls the layer's own forward
        from pipelines.quant.int8 import apply_int8

        apply_int8(vae, torch.float32)
    # 64 KiB: the 64x64 pictures' 8- and 16-channel activations (128-256 KiB) run in 2-4 bands each.
    monkeypatch.setattr(vae_lean, "BAND_BYTES", 64 * 1024)
    z = torch.randn(1, 4, 32, 32)
    convs = [m for m in vae.decoder.modules() if isinstance(m, torch.nn.Conv2d)]
    calls = {"n": 0}
    last, forward = convs[-1], convs[-1].forward

    def counted(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return forward(x)

    last.forward = counted  # what lean_decoder finds and bands (a band calls the layer's forward)
    before = [m.__dict__.get("forward") for m in convs]
    with torch.no_grad():
        plain = vae.decode(z, return_dict=False)[0]
        plain_calls, calls["n"] = calls["n"], 0
        with lean_decoder(vae):
            lean = vae.decode(z, return_dict=False)[0]
            assert all(
                a.inplace for a in (vae.decoder.conv_act, vae.decoder.up_blocks[0].resnets[0].nonlinearity)
            )
    assert calls["n"] > plain_calls  # the last conv (64x64, 8 channels: 128 KiB) ran in bands
    # Same math on the same inputs; bands of a few rows may get another blocking of the same sums from the CPU
    # kernel: float32 rounding, 1.3e-6 measured on outputs up to 1.7 (bit for bit at the real 4 MiB bands on
    # the SD-shaped VAE, see the README).
    torch.testing.assert_close(lean, plain, rtol=0, atol=1e-5)
    # Put back: plain forwards, SiLU not in place.
    assert [m.__dict__.get("forward") for m in convs] == before
    assert not vae.decoder.conv_act.inplace
    with torch.no_grad():
        assert torch.equal(vae.decode(z, return_dict=False)[0], plain)  # the plain path again: same kernels
