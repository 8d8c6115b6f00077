"""The working-memory formulas against the activations full-size models really keep alive.

The sampler, VAE and text-encoder nodes reserve these figures beside the weights before a first run (a
learned peak replaces them afterwards). Too low and a RAM/VRAM budget is overrun; far too high and
streaming keeps fewer blocks resident than it could. Each model here is the published architecture built
on the meta device, measured with tests/live_tensors.py.
"""

from __future__ import annotations

import pytest
import torch

from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.sampling import denoiser_working_bytes
from pipelines.diffusion.vae_lean import lean_decoder
from pipelines.diffusion.values import DenoiserRef
from pipelines.diffusion.working import diffusion_working_bytes
from tests.live_tensors import live_tensor_peak

META = torch.device("meta")

SD15_UNET = dict(
    block_out_channels=(320, 640, 1280, 1280),
    layers_per_block=2,
    cross_attention_dim=768,
    attention_head_dim=8,
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
)
SDXL_UNET = dict(
    block_out_channels=(320, 640, 1280),
    layers_per_block=2,
    cross_attention_dim=2048,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    transformer_layers_per_block=(1, 2, 10),
    attention_head_dim=(5, 10, 20),
    use_linear_projection=True,
    addition_embed_type="text_time",
    addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816,
)


def zeros(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, device=META)


def ref_for(family: str, model: torch.nn.Module) -> DenoiserRef:
    return DenoiserRef(None, FAMILIES[family], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]


def assert_covers(formula: int, measured: int, most: float) -> None:
    """The reservation covers what the call keeps alive, without hoarding."""
    assert formula >= measured, f"formula {formula / 2**20:.0f} MiB < measured {measured / 2**20:.0f} MiB"
    assert formula <= most * measured, (
        f"formula {formula / 2**20:.0f} MiB > {most}x {measured / 2**20:.0f} MiB"
    )


@pytest.mark.slow  # over 5 s in the fast lane on a loaded 2-core machine
@pytest.mark.parametrize(("family", "config", "size"), [("sd", SD15_UNET, 256), ("sdxl", SDXL_UNET, 512)])
def test_unet_formula_covers_the_live_activations(family: str, config: dict, size: int) -> None:
    from diffusers import UNet2DConditionModel

    with META:
        unet = UNet2DConditionModel(**config)
    batch = 2  # classifier-free guidance
    kwargs: dict = {}
    if family == "sdxl":
        kwargs["added_cond_kwargs"] = {"text_embeds": zeros(batch, 1280), "time_ids": zeros(batch, 6)}
    latents = zeros(batch, 4, size // 8, size // 8)
    context = zeros(batch, 77, config["cross_attention_dim"])
    measured = live_tensor_peak(
        unet, lambda: unet(latents, zeros(1), encoder_hidden_states=context, **kwargs)
    )
    formula = denoiser_working_bytes(ref_for(family, unet), size, size, batch=1, guidance=True)
    assert_covers(formula, measured, most=1.15)


def test_dit_formulas_cover_the_live_activations() -> None:
    from diffusers import FluxTransformer2DModel, SD3Transformer2DModel

    size = 512
    with META:  # the published widths; two blocks are enough, the peak is within one
        sd3 = SD3Transformer2DModel(
            sample_size=128,
            num_layers=2,
            attention_head_dim=64,
            num_attention_heads=24,
            joint_attention_dim=4096,
            caption_projection_dim=1536,
            pooled_projection_dim=2048,
        )
        flux = FluxTransformer2DModel(num_layers=1, num_single_layers=1, guidance_embeds=True)
    measured = live_tensor_peak(
        sd3,
        lambda: sd3(
            hidden_states=zeros(2, 16, size // 8, size // 8),
            encoder_hidden_states=zeros(2, 77 + 256, 4096),
            pooled_projections=zeros(2, 2048),
            timestep=zeros(2),
        ),
    )
    assert_covers(denoiser_working_bytes(ref_for("sd3", sd3), size, size, 1, True), measured, most=1.5)

    tokens = (size // 16) ** 2
    measured = live_tensor_peak(
        flux,
        lambda: flux(
            hidden_states=zeros(1, tokens, 64),
            encoder_hidden_states=zeros(1, 512, 4096),
            pooled_projections=zeros(1, 768),
            timestep=zeros(1),
            img_ids=zeros(tokens, 3),
            txt_ids=zeros(512, 3),
            guidance=zeros(1),
        ),
    )
    assert_covers(denoiser_working_bytes(ref_for("flux", flux), size, size, 1, False), measured, most=1.15)


def test_vae_formulas_cover_the_live_activations() -> None:
    from diffusers import AutoencoderKL

    channels = (128, 256, 512, 512)
    with META:
        vae = AutoencoderKL(
            block_out_channels=channels,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            layers_per_block=2,
        )
    size = 256

    def lean_decode(dtype: torch.dtype = torch.float32) -> None:  # as pipelines/diffusion/vae.py decodes
        with lean_decoder(vae):
            vae.decode(zeros(1, 4, size // 8, size // 8).to(dtype))

    decode = live_tensor_peak(vae, lean_decode)
    encode = live_tensor_peak(vae, lambda: vae.encode(zeros(1, 3, size, size)))
    common = dict(height=size, width=size, block_out_channels=channels)
    assert_covers(diffusion_working_bytes("vae_decode", **common), decode, most=1.15)
    assert_covers(diffusion_working_bytes("vae_encode", **common), encode, most=1.15)
    # Half precision keeps the plain resnets (the fused GroupNorm reduces at float32 only): its own formula.
    vae.half()
    half = live_tensor_peak(vae, lambda: lean_decode(torch.float16))
    half_formula = diffusion_working_bytes("vae_decode", **common, dtype=torch.float16)
    assert_covers(half_formula, half, most=1.15)
