"""LTX-2's working-memory formulas against the live tensors of the full-size models, on the meta device.

`tests/live_tensors.py` counts what each call keeps alive; the formulas (`ltx2_sampling.ltx2_working`,
`ltx2_text.gemma_stack_working_bytes`, `ltx2_vae.ltx2_vae_working`) must cover it, at most 15% above (a
budget would be overrun below; streaming would keep fewer blocks than it could above). No weights are read.
"""

from __future__ import annotations

import pytest
import torch

# Each case builds a full-width model on the meta device (about a second): the slow lane.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("width", "height", "frames"), [(768, 512, 121), (1280, 704, 121), (768, 512, 49)])
def test_working_memory_formula_covers_the_full_size_transformer(
    width: int, height: int, frames: int
) -> None:
    """The sampler's reservation against what LTX-2 19B's transformer (the class defaults: 4096 video and
    2048 audio width) keeps alive for the doubled CFG call (meta device, tests/live_tensors.py; two blocks
    are enough, the peak is within one), with LTX-2's VAE factors (32x in space, 8x in time), 24 fps sound
    (16 kHz, hop 160, 4x) and the 1024 connector tokens at Gemma 3 12B's width."""
    from diffusers import LTX2VideoTransformer3DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.ltx2_sampling import ltx2_working
    from pipelines.diffusion.values import DenoiserRef
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        model = LTX2VideoTransformer3DModel(num_layers=2, caption_channels=3840)
    f, h, w = (frames - 1) // 8 + 1, height // 32, width // 32
    audio = round(frames / 24 * 16000 / 160 / 4)
    x, a = torch.zeros(2, f * h * w, 128, device=meta), torch.zeros(2, audio, 128, device=meta)
    text, mask, t = (
        torch.zeros(2, 1024, 3840, device=meta),
        torch.ones(2, 1024, device=meta),
        torch.zeros(2, device=meta),
    )
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=x,
            audio_hidden_states=a,
            encoder_hidden_states=text,
            audio_encoder_hidden_states=text,
            timestep=t,
            sigma=t,
            encoder_attention_mask=mask,
            audio_encoder_attention_mask=mask,
            num_frames=f,
            height=h,
            width=w,
            fps=24.0,
            audio_num_frames=audio,
            video_coords=model.rope.prepare_video_coords(2, f, h, w, meta, fps=24.0),
            audio_coords=model.audio_rope.prepare_audio_coords(2, audio, meta),
            use_cross_timestep=True,
            return_dict=False,
        ),
    )
    ref = DenoiserRef(None, FAMILIES["ltx2"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    formula = ltx2_working(ref, f * h * w, audio, 1024).formula_bytes
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    print(f"ltx2 working {width}x{height}x{frames}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.parametrize("layers", [2, 48])
def test_working_memory_formula_covers_the_full_size_text_encoder(layers: int) -> None:
    """Gemma 3 12B's text widths (48 layers is LTX-2's encoder) over the pipeline's 1024 padded tokens, on the
    meta device, as `encode_ltx2` calls it (every hidden state, logits at the last position only) and stacks
    the states. A one-layer vision tower stands in for SigLIP: it never runs for text. The attention mask is
    left out: transformers' mask code reads its values, which meta tensors have none of."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    from pipelines.diffusion.ltx2_text import gemma_stack_working_bytes
    from tests.live_tensors import live_tensor_peak

    text = dict(
        vocab_size=262208,
        hidden_size=3840,
        intermediate_size=15360,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=256,
        sliding_window=1024,
    )
    vision = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = Gemma3Config(text_config=text, vision_config={**vision, "image_size": 28, "patch_size": 14})
    meta = torch.device("meta")
    with meta:
        model = Gemma3ForConditionalGeneration(config)
    ids = torch.zeros(1, 1024, dtype=torch.long, device=meta)

    def encode() -> torch.Tensor:
        states = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states
        return torch.stack(states, dim=-1).flatten(2, 3)

    measured = live_tensor_peak(model, encode)
    formula = gemma_stack_working_bytes(config.to_dict(), 1024, torch.float32)
    print(f"ltx2 text encoder working, {layers} layers: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


# LTX-2.0's video VAE as diffusers' conversion script configures it (scripts/convert_ltx2_to_diffusers.py).
LTX20_VAE = dict(
    decoder_block_out_channels=(256, 512, 1024),
    layers_per_block=(4, 6, 6, 2, 2),
    decoder_layers_per_block=(5, 5, 5, 5),
    decoder_spatio_temporal_scaling=(True, True, True),
    decoder_inject_noise=(False, False, False, False),
    upsample_type=("spatiotemporal", "spatiotemporal", "spatiotemporal"),
    upsample_residual=(True, True, True),
    upsample_factor=(2, 2, 2),
    decoder_causal=False,
    spatial_compression_ratio=32,
    temporal_compression_ratio=8,
)


@pytest.mark.parametrize(("width", "height", "frames"), [(768, 512, 121), (768, 512, 49), (1280, 704, 121)])
def test_working_memory_formula_covers_the_full_size_video_vae(width: int, height: int, frames: int) -> None:
    from diffusers import AutoencoderKLLTX2Video

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.ltx2_vae import ltx2_vae_working
    from pipelines.diffusion.values import Latents, VaeRef
    from tests.live_tensors import live_tensor_peak

    meta = torch.device("meta")
    with meta:
        vae = AutoencoderKLLTX2Video(**LTX20_VAE)
    latents = torch.zeros(1, 128, (frames - 1) // 8 + 1, height // 32, width // 32, device=meta)
    measured = live_tensor_peak(vae, lambda: vae.decode(latents, None, return_dict=False))
    ref = VaeRef(None, FAMILIES["ltx2"], dict(vae.config), torch.float32)  # type: ignore[arg-type]
    assert ref.scale_factor == 32
    formula = ltx2_vae_working(ref, Latents(latents, 32)).formula_bytes
    print(f"ltx2 vae working {width}x{height}x{frames}: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


@pytest.mark.parametrize("audio_frames", [51, 126, 252])  # 2, 5 and 10 s of sound (25 latent frames a second)
def test_working_memory_formulas_cover_the_full_size_audio_decoder(audio_frames: int) -> None:
    """LTX-2.0's audio VAE and vocoder as diffusers' conversion script configures them."""
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    from pipelines.diffusion.ltx2_vae import audio_decoder_working
    from pipelines.diffusion.values import AudioDecoderRef
    from tests.live_tensors import live_tensor_peak

    audio = dict(base_channels=128, ch_mult=(1, 2, 4), num_res_blocks=2, latent_channels=8, mel_bins=64)
    audio |= dict(output_channels=2, in_channels=2, resolution=256, attn_resolutions=None, norm_type="pixel")
    audio |= dict(causality_axis="height", mid_block_add_attention=False, is_causal=True, double_z=True)
    vocoder = dict(in_channels=128, hidden_channels=1024, out_channels=2, output_sampling_rate=24000)
    vocoder |= dict(upsample_kernel_sizes=[16, 15, 8, 4, 4], upsample_factors=[6, 5, 2, 2, 2])
    vocoder |= dict(resnet_kernel_sizes=[3, 7, 11], resnet_dilations=[[1, 3, 5], [1, 3, 5], [1, 3, 5]])
    vocoder |= dict(act_fn="leaky_relu", antialias=False, final_act_fn="tanh", final_bias=True)
    meta = torch.device("meta")
    with meta:
        audio_vae, voc = AutoencoderKLLTX2Audio(**audio), LTX2Vocoder(**vocoder)
    z = torch.zeros(1, 8, audio_frames, 16, device=meta)
    vae_measured = live_tensor_peak(audio_vae, lambda: audio_vae.decode(z, return_dict=False))
    mel = audio_vae.decode(z, return_dict=False)[0]
    voc_measured = live_tensor_peak(voc, lambda: voc(mel))
    ref = AudioDecoderRef(None, dict(audio_vae.config), None, dict(voc.config), torch.float32)  # type: ignore[arg-type]
    vae_working, voc_working = audio_decoder_working(ref, audio_frames)
    for name, formula, measured in (
        ("audio vae", vae_working, vae_measured),
        ("vocoder", voc_working, voc_measured),
    ):
        ratio = formula.formula_bytes / measured
        print(f"ltx2 {name} working, {audio_frames} audio frames: {ratio:.3f}x")
        assert 1 <= ratio <= 1.15, f"{name}: {ratio:.3f}x of {measured / 2**20:.0f} MiB"
