"""Working-memory formulas against the real thing, and the learned store replacing them."""

from __future__ import annotations

import pytest
import torch

from memory import kv_cache_bytes
from pipelines.diffusion import vae_lean
from pipelines.diffusion.working import diffusion_working_bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_formula_equals_the_cache_generate_leaves(dtype: torch.dtype) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query: the cache is sized by kv heads, not attention heads
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    prompt = torch.randint(0, 128, (2, 7))
    new = 5
    out = model.generate(
        prompt,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    cache = getattr(out, "cache", None) or out.past_key_values
    actual = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    # The last sampled token is returned but never fed back, so it has no cached key/value.
    seq_len = out.sequences.shape[1] - 1
    assert seq_len == 7 + new - 1
    expected = kv_cache_bytes(cfg.num_hidden_layers, 2, seq_len, cfg.num_key_value_heads, cfg.head_dim, dtype)
    assert actual == expected


def test_diffusion_formula_scales_with_pixels_and_batch() -> None:
    base = diffusion_working_bytes("denoiser", height=512, width=512)
    assert diffusion_working_bytes("denoiser", height=1024, width=1024) == pytest.approx(4 * base, rel=0.01)
    assert diffusion_working_bytes("denoiser", height=512, width=512, batch=2) == 2 * base
    half = diffusion_working_bytes("denoiser", height=512, width=512, dtype=torch.float16)
    assert half * 2 == base
    vae = diffusion_working_bytes(
        "vae_decode", height=512, width=512, block_out_channels=(128, 256, 512, 512)
    )
    # float32: the lean decode's resnets (vae_lean): the last up block's first resnet's 256-channel input and its
    # 128-channel output, plus the row bands
    large = (256 + 128) * 512 * 512 * 4 + 4 * vae_lean.BAND_BYTES
    assert vae == large + large // 64
    half = diffusion_working_bytes(
        "vae_decode", height=512, width=512, block_out_channels=(128, 256, 512, 512), dtype=torch.float16
    )
    large = (
        3 * 256 * 512 * 512 * 2
    )  # plain resnets: the last up block's input, GroupNorm and SiLU at 256 channels
    assert half == large + large // 64
    with pytest.raises(ValueError):
        diffusion_working_bytes("teapot", height=8, width=8)
