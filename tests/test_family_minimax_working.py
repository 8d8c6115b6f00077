"""MiniMax H3's working-memory formulas against the live tensors of the full-size models, on the meta device.

`tests/live_tensors.py` counts what each call keeps alive; the formulas (`minimax_sampling.minimax_working`,
`minimax_text.minimax_text_working`, `minimax_vae.minimax_vae_working` / `minimax_audio_working`) must
cover it, at most 15% above (a budget would be overrun below; streaming would keep fewer blocks than it
could above). The models are the classes' defaults (the release's widths) with fewer layers where the peak
is within one layer; no weights are read.
"""

from __future__ import annotations

import pytest
import torch

from tests.live_tensors import live_tensor_peak

pytestmark = pytest.mark.slow  # each case builds a full-width model on the meta device (seconds)
META = torch.device("meta")


def _assert_covers(what: str, formula: int, measured: int) -> None:
    print(f"minimax {what}: {formula / measured:.3f}x of {measured / 2**20:.0f} MiB")
    assert measured <= formula <= 1.15 * measured, (
        f"{what}: {formula / measured:.3f}x of {measured / 2**20:.0f} MiB"
    )


@pytest.mark.parametrize(("width", "height", "frames", "text"), [(640, 640, 124, 64), (768, 448, 243, 256)])
def test_the_transformer_formula_covers_one_call(width: int, height: int, frames: int, text: int) -> None:
    """One packed call (no CFG: guidance-distilled) of MiniMax H3's transformer (5376 wide, 14336 FFN; two
    blocks, the peak is within one) over text, audio and video rows at the release's 16x VAE."""
    from diffusers import MiniMaxH3Transformer3DModel

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.minimax_layout import (
        audio_latent_num_frames,
        build_packed_sequence,
        row_timesteps,
        video_latent_num_frames,
    )
    from pipelines.diffusion.minimax_sampling import minimax_working
    from pipelines.diffusion.values import DenoiserRef

    with META:
        model = MiniMaxH3Transformer3DModel(num_layers=2)
    latent_frames, audio = video_latent_num_frames(frames, 17, 5), audio_latent_num_frames(frames)
    layout = build_packed_sequence(
        torch.ones(text, dtype=torch.long), latent_frames, height // 16, width // 16, audio, (1, 2, 2)
    )
    unique, index = row_timesteps(layout, 0.5, 0.6)
    rows = layout.video_indices.numel()
    measured = live_tensor_peak(
        model,
        lambda: model(
            hidden_states=torch.zeros(1, rows, 96, device=META),
            audio_hidden_states=torch.zeros(1, 2 * audio, 32, device=META),
            encoder_hidden_states=torch.zeros(1, text, 5120, device=META),
            timestep=unique.to(META),
            timestep_indices=index.to(META),
            return_dict=False,
            **layout.fields(META),
        ),
    )
    ref = DenoiserRef(None, FAMILIES["minimax"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    _assert_covers(
        f"transformer {width}x{height}x{frames}",
        minimax_working(ref, layout.token_tags.numel()).formula_bytes,
        measured,
    )


def test_the_text_encoder_formula_covers_hidden_state_50() -> None:
    """Qwen3-VL-32B's text widths (64 layers, 5120 wide), every hidden state kept, as `encode_minimax` calls
    it (use_cache off); a one-layer vision tower stands in (a text prompt never runs it). Positions are
    passed (the rope index reads values, which meta tensors have none of)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from pipelines.diffusion.minimax_text import TEXT_ENCODER_LAYER, minimax_text_working

    text = dict(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64)
    text |= dict(num_attention_heads=64, num_key_value_heads=8, head_dim=128)
    vision = dict(depth=1, hidden_size=64, intermediate_size=64, num_heads=2, out_hidden_size=5120)
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={**vision, "deepstack_visual_indexes": [0]},
        attn_implementation="sdpa",
    )
    with META:
        model = Qwen3VLForConditionalGeneration(config)
    tokens = 512
    ids = torch.zeros(1, tokens, dtype=torch.long, device=META)
    positions = torch.arange(tokens, device=META).view(1, 1, -1).expand(3, 1, -1)

    def call() -> torch.Tensor:
        out = model.model(input_ids=ids, position_ids=positions, use_cache=False, output_hidden_states=True)
        return out.hidden_states[TEXT_ENCODER_LAYER]

    measured = live_tensor_peak(model, call)
    _assert_covers(
        "text encoder", minimax_text_working(config.to_dict(), tokens, torch.float32).formula_bytes, measured
    )


def test_the_vae_formulas_cover_decode_and_a_keyframe_encode() -> None:
    """The release's video VAE (16x, ViT decoder of two layers: the peak is the assembled frames) decoding
    124 frames at 512x256, and encoding a 768x448 keyframe; the audio VAE decoding their 207 stereo latents."""
    from diffusers import AutoencoderKLMiniMaxH3, AutoencoderKLMiniMaxH3Audio

    from pipelines.diffusion.families import FAMILIES
    from pipelines.diffusion.minimax_vae import minimax_audio_working, minimax_vae_working
    from pipelines.diffusion.values import AudioDecoderRef, VaeRef

    with META:
        vae = AutoencoderKLMiniMaxH3(decoder_num_layers=2)
        audio_vae = AutoencoderKLMiniMaxH3Audio()
    ref = VaeRef(None, FAMILIES["minimax"], dict(vae.config), torch.float32)  # type: ignore[arg-type]
    # 512x256, where the chunk's share is largest (768x448 measured 1.135x, 1344x768 1.06x: slower to run)
    z = torch.zeros(1, 24, 37, 256 // 16, 512 // 16, device=META)
    measured = live_tensor_peak(vae, lambda: vae.decode(z, return_dict=False)[0])
    _assert_covers("video decode 512x256", minimax_vae_working(ref, 256, 512, 124).formula_bytes, measured)
    x = torch.zeros(1, 3, 1, 448, 768, device=META)
    measured = live_tensor_peak(vae, lambda: vae.encode(x, return_dict=False)[0].sample())
    _assert_covers(
        "keyframe encode", minimax_vae_working(ref, 448, 768, 1, encode=True).formula_bytes, measured
    )
    audio_ref = AudioDecoderRef(None, dict(audio_vae.config), None, {}, torch.float32)  # type: ignore[arg-type]
    a = torch.zeros(2, 32, 207, device=META)
    measured = live_tensor_peak(audio_vae, lambda: audio_vae.decode(a, return_dict=False)[0])
    _assert_covers("audio decode", minimax_audio_working(audio_ref, 207).formula_bytes, measured)
