"""ComfyUI's quantized text encoder files through the split loaders: a tiny Qwen3-VL written as MiniMax H3's
`nvfp4_awq` text encoder is (NVFP4 layers, AWQ `pre_quant_scale` on `o_proj` / `down_proj`, an int8 embedding
table) loads through the Qwen3-VL text-encoder loader with every weight the file's, dequantized.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts.quant_writer import comfy_quant_state, fake_quantized
from pipelines.diffusion.comfy_layouts.text_encoders import load_comfy_text_encoder
from pipelines.diffusion.comfy_layouts.writer import text_encoder_to_comfy

pytestmark = (
    pytest.mark.slow
)  # builds the tiny Qwen-Image 2.1 pipeline and loads a model (~0.5 s after the imports)


def _awq(key: str) -> bool:
    return key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")) and not key.startswith("visual.")


def _nvfp4(key: str) -> bool:
    return "embed_tokens" not in key


def _awq_file(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The key pattern of MiniMax H3's `qwen3vl_32b_minimax_h3_nvfp4_awq` (every projection NVFP4, AWQ scales on
    o_proj / down_proj, the embedding int8 per row), at the tiny widths."""
    embed = {k: t for k, t in state.items() if "embed_tokens" in k}
    rest = {k: t for k, t in state.items() if k not in embed}
    return {**comfy_quant_state(rest, "nvfp4", select=_nvfp4, awq=_awq), **comfy_quant_state(embed, "int8")}


def test_an_nvfp4_awq_qwen3vl_file_loads_with_its_weights_dequantized(tmp_path: Path, cpu_memory) -> None:
    from pipelines.diffusion.demo_qwenimage21 import build_tiny_qwenimage21

    encoder = build_tiny_qwenimage21().text_encoder
    state = encoder.state_dict()
    path = tmp_path / "qwen3vl_8b_nvfp4_awq.safetensors"
    comfy = text_encoder_to_comfy(state, type(encoder).__name__)
    save_file({k: v.contiguous() for k, v in _awq_file(comfy).items()}, str(path))

    ref, message = load_comfy_text_encoder(cpu_memory, path)
    assert "qwen3-vl text encoder for Qwen-Image 2.1" in message
    assert "nvfp4 x" in message and "int8_tensorwise x1, dequantized" in message
    # The reference: the same per-tensor quantization in the module's own names, read back.
    expected = {
        **fake_quantized(
            {k: t for k, t in state.items() if "embed_tokens" not in k}, "nvfp4", select=_nvfp4, awq=_awq
        ),
        **fake_quantized({k: t for k, t in state.items() if "embed_tokens" in k}, "int8"),
    }
    with cpu_memory.use(ref.handles[0]) as module:
        loaded = module.state_dict()
        wrong = [n for n in loaded if not torch.equal(loaded[n], expected[n])]
        assert sorted(loaded) == sorted(expected) and not wrong, wrong[:3]
        o_proj = "model.language_model.layers.0.self_attn.o_proj.weight"
        # Quantization changed the projections (4-bit codes), and the AWQ scale was applied: within NVFP4's
        # per-block step of the smoothed weight (see test_comfy_quant) times the scale, of the float weight.
        assert not torch.equal(loaded[o_proj], state[o_proj])
        pre = 1.0 + 0.25 * torch.sin(torch.arange(state[o_proj].shape[1], dtype=torch.float32))
        smoothed = state[o_proj] / pre.to(torch.bfloat16).float()
        step = smoothed.reshape(smoothed.shape[0], -1, 16).abs().amax(-1, keepdim=True) / 6 * (1 + 2**-4)
        bound = step.expand(-1, -1, 16).reshape(smoothed.shape) * pre.to(torch.bfloat16).float()
        assert ((loaded[o_proj] - state[o_proj]).abs() <= bound + 1e-6).all()
