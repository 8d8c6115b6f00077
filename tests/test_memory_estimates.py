"""Working-memory formulas against the real thing, and the learned store replacing them."""

from __future__ import annotations

import json

import pytest
import torch

from memory import MemoryConfig, MemoryManager, diffusion_working_bytes, kv_cache_bytes
from memory.learned import FILENAME


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
    assert vae == (256 + 3 * 128) * 512 * 512 * 4
    with pytest.raises(ValueError):
        diffusion_working_bytes("teapot", height=8, width=8)


def test_learned_peak_replaces_the_formula_and_persists(tmp_path) -> None:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
    save_file(net.state_dict(), tmp_path / "m.safetensors")
    cfg = MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path)
    from memory import ComponentSpec

    def build() -> torch.nn.Module:
        fresh = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
        fresh.load_state_dict(net.state_dict())
        return fresh

    spec = ComponentSpec("m#net", "net", "other", build, (tmp_path / "m.safetensors",))
    with MemoryManager(cfg) as mm:
        handle = mm.register(spec)
        assert mm.estimate_working_bytes("Run", "m#net", "8x256", fallback=123) == 123
        with mm.node_scope("n1", "Run", "8x256"), mm.use(handle) as module:
            # ~64 MiB of activations held at once: the peak must see it.
            held = [module(torch.randn(8192, 256)) for _ in range(8)]
            del held
        measured = mm.estimate_working_bytes("Run", "m#net", "8x256", fallback=123)
        peak = mm.telemetry.events()[-1]
        assert peak.node_id == "n1" and peak.peak_bytes >= peak.baseline_bytes
    assert measured >= 8 * 8192 * 256 * 4
    data = json.loads((tmp_path / FILENAME).read_text())
    assert any("Run|m#net|8x256" in k for k in data["entries"])
    with MemoryManager(cfg) as again:
        assert again.estimate_working_bytes("Run", "m#net", "8x256", fallback=1) == measured
