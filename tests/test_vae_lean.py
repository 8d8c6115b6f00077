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


def _lean_decode(vae: torch.nn.Module, z: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), lean_decoder(vae):
        return vae.decode(z, return_dict=False)[0]


@pytest.mark.slow  # builds a diffusers VAE (imports diffusers, ~1 s)
def test_lean_resnets_never_normalize_a_whole_input_and_hold_fewer_bytes(monkeypatch) -> None:
    from tests.live_tensors import live_tensor_peak

    vae = _tiny_vae()
    # 16 KiB: the 64x64 picture's 8-channel (128 KiB) and 32x32 16-channel (64 KiB) resnets run in 4-8 bands.
    monkeypatch.setattr(vae_lean, "BAND_BYTES", 16 * 1024)
    z = torch.randn(1, 4, 32, 32)
    normalized: list[int] = []  # bytes of each input a resnet's GroupNorm module was called on
    for block in vae.decoder.up_blocks:
        for resnet in block.resnets:
            for norm in (resnet.norm1, resnet.norm2):
                forward = norm.forward

                def counted(x: torch.Tensor, forward=forward) -> torch.Tensor:  # noqa: ANN001
                    normalized.append(x.numel() * x.element_size())
                    return forward(x)

                norm.forward = counted
    with torch.no_grad():
        plain = vae.decode(z, return_dict=False)[0]
    assert max(normalized) > vae_lean.BAND_BYTES  # the plain decode normalizes whole inputs
    plain_peak = live_tensor_peak(vae, lambda: vae.decode(z))
    normalized.clear()
    lean = _lean_decode(vae, z)
    assert normalized == []  # every up block resnet here is above 16 KiB: all fused, in bands
    lean_peak = live_tensor_peak(vae, lambda: _lean_decode(vae, z))
    # Plain: the last up block's 16-channel input, its GroupNorm and SiLU outputs (3 x 256 KiB) and more;
    # lean: that input and the resnet's one 8-channel output (256 + 128 KiB) plus bands.
    assert lean_peak < 0.7 * plain_peak, (lean_peak, plain_peak)
    # The fused GroupNorm reduces its statistics with `var_mean` and applies `x * scale + shift` itself:
    # float32 rounding against ATen's GroupNorm kernel (5.5e-6 measured on the SD-shaped VAE's outputs up to
    # 3.7 at 256x256, 9 of 196608 8-bit values one level apart); convs and the rest are the same kernels.
    torch.testing.assert_close(lean, plain, rtol=0, atol=1e-5)


@pytest.mark.slow  # builds a diffusers VAE (imports diffusers, ~1 s)
def test_a_resnet_with_forward_hooks_on_its_layers_keeps_its_plain_forward(monkeypatch) -> None:
    vae = _tiny_vae()
    monkeypatch.setattr(vae_lean, "BAND_BYTES", 16 * 1024)
    resnet = vae.decoder.up_blocks[-1].resnets[0]
    seen: list[int] = []
    # What a streaming policy or a patch registers: the fused path would skip it, so the block runs plain.
    resnet.norm1.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[-2]))
    _lean_decode(vae, torch.randn(1, 4, 32, 32))
    assert seen == [64]  # called once, on the whole 64-row input
