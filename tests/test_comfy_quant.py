"""ComfyUI's `comfy_quant` layouts: each format's round trip within the error its definition allows, the stored
bytes laid out as the facts say (nibble order, the swizzled scale grid, the Hadamard matrix), the file read
lazily per tensor by `lazy_load.header_stubs`, and unreadable formats refused naming the file, tensor and format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pipelines.diffusion.comfy_layouts import comfy_quant as cq
from pipelines.diffusion.comfy_layouts.common import KeyMapTensors, file_form
from pipelines.diffusion.comfy_layouts.quant_writer import (
    comfy_quant_state,
    convrot_group,
    fake_quantized,
    marker,
    quantize_int8,
    quantize_nvfp4,
)
from pipelines.diffusion.lazy_load import header_stubs, trace_conversion

# float32 arithmetic on top of the format's own rounding: a few ulps of the values' size.
EPS = 1e-5


def weight(rows: int = 64, cols: int = 256, seed: int = 0) -> torch.Tensor:
    """Gaussian rows whose columns differ in size (so blocks and rows get different scales)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g) * torch.linspace(0.05, 2.0, cols)


@pytest.mark.parametrize("fmt", ["int8", "int8_tensor"])
def test_int8_reads_back_within_half_a_step(fmt: str) -> None:
    w = weight()
    q, scale = quantize_int8(w, per_row=fmt == "int8")
    back = fake_quantized({"a.weight": w}, fmt)["a.weight"]
    # Round to nearest: each value is off by at most half of one int8 step (its row's or the tensor's scale).
    assert ((back - w).abs() <= scale / 2 + EPS).all()
    assert scale.shape == ((64, 1) if fmt == "int8" else ())


def test_int8_convrot_rows_read_back_within_the_rotated_rounding() -> None:
    w = weight()
    stored = comfy_quant_state({"a.weight": w}, "int8_convrot")
    assert json.loads(bytes(stored["a.comfy_quant"].tolist())) == {
        "format": "int8_tensorwise",
        "convrot": True,
        "convrot_groupsize": 256,
    }
    back = fake_quantized({"a.weight": w}, "int8_convrot")["a.weight"]
    scale = stored["a.weight_scale"].reshape(-1)
    # Rounding happens on the rotated row (each value off by <= half a step); the rotation back is orthogonal,
    # so it keeps the row's error norm: ||error|| <= sqrt(columns) * step / 2.
    err = (back - w).norm(dim=1)
    assert (err <= math.sqrt(w.shape[1]) * scale / 2 * (1 + EPS)).all()
    # The file holds the rotated rows: read without undoing the rotation they are another matrix.
    plain = stored["a.weight"].float() * stored["a.weight_scale"]
    assert (plain - w).abs().max() > 100 * (back - w).abs().max()


def test_the_convrot_rotation_is_comfys_regular_hadamard() -> None:
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float32)
    assert torch.equal(cq.hadamard(4) * 2, h4)
    assert torch.equal(cq.hadamard(16) * 4, torch.kron(h4, h4))
    h = cq.hadamard(256)
    assert torch.equal(h, h.T) and torch.equal(h @ h, torch.eye(256))  # entries +-1/16: exact in float32
    # The group a writer picks: the largest power of 4 up to 256 dividing the row (none: unrotated).
    assert [convrot_group(n) for n in (4096, 3840, 96, 16, 8, 6)] == [256, 256, 16, 16, 4, 0]


def test_nvfp4_reads_back_within_one_block_step() -> None:
    w = weight()
    stored = comfy_quant_state({"a.weight": w}, "nvfp4")
    assert stored["a.weight"].shape == (64, 128) and stored["a.weight"].dtype == torch.uint8
    assert (
        stored["a.weight_scale"].shape == (128, 16) and stored["a.weight_scale"].dtype == torch.float8_e4m3fn
    )
    back = fake_quantized({"a.weight": w}, "nvfp4")["a.weight"]
    block_max = w.reshape(64, -1, 16).abs().amax(dim=-1, keepdim=True)
    # A block's step is its scale, absmax / 6 rounded to float8_e4m3fn (relative error <= 2^-4); E2M1's widest
    # gap (4 -> 6) is 2 steps, so rounding to the nearest code is off by <= 1 step (clamping at 6 by less).
    bound = (block_max / 6 * (1 + 2**-4)).expand(-1, -1, 16).reshape(64, 256)
    assert ((back - w).abs() <= bound + EPS).all()


def test_nvfp4_awq_weights_read_back_times_their_pre_quant_scale() -> None:
    w = weight()
    stored = comfy_quant_state({"a.weight": w}, "nvfp4", awq=lambda k: True)
    pre = stored["a.pre_quant_scale"]
    assert pre.shape == (256,) and pre.dtype == torch.bfloat16
    back = fake_quantized({"a.weight": w}, "nvfp4", awq=lambda k: True)["a.weight"]
    smoothed = w / pre.float()  # what was quantized: ComfyUI multiplies the input by the scale at run time
    block_max = smoothed.reshape(64, -1, 16).abs().amax(dim=-1, keepdim=True)
    bound = (block_max / 6 * (1 + 2**-4)).expand(-1, -1, 16).reshape(64, 256) * pre.float()
    assert ((back - w).abs() <= bound + EPS).all()


def test_nvfp4_bytes_hold_the_even_column_in_the_high_nibble_and_scales_swizzled() -> None:
    rows = 130  # two row tiles of the scale grid
    packed = torch.zeros(rows, 16, dtype=torch.uint8)  # 32 columns: 2 blocks a row
    packed[129, 8] = 0x2F  # row 129, columns 16 (code 2: +1.0) and 17 (code 15: -6.0)
    plain = torch.ones(rows, 2)
    plain[129, 1] = 0.5
    # cuBLAS's layout: 128x4 tiles, row-tile major; a tile's (row 32 i + j, column c) at 16 j + 4 i + c.
    grid = torch.zeros(256, 4)
    for r in range(rows):
        for c in range(2):
            tile = (r // 128) * 1 + c // 4  # 1 column tile (2 blocks a row)
            grid.view(-1)[tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4] = plain[r, c]
    assert torch.equal(cq.unswizzle(grid, rows, 2), plain)
    assert torch.equal(cq.swizzle(plain), grid)
    w = cq.dequantize_nvfp4(packed, grid.to(torch.float8_e4m3fn), torch.tensor(2.0))
    assert w[129, 16].item() == 1.0 * 0.5 * 2.0 and w[129, 17].item() == -6.0 * 0.5 * 2.0
    assert w.abs().sum().item() == 7.0


def test_mxfp8_reads_back_within_float8_rounding() -> None:
    w = weight()
    stored = comfy_quant_state({"a.weight": w}, "mxfp8")
    assert stored["a.weight"].dtype == torch.float8_e4m3fn and stored["a.weight_scale"].shape == (128, 8)
    back = fake_quantized({"a.weight": w}, "mxfp8")["a.weight"]
    exponents = cq.unswizzle(stored["a.weight_scale"], 64, 8).to(torch.float32)
    step = torch.exp2(exponents - 127).repeat_interleave(32, dim=1)
    # float8_e4m3fn keeps 3 mantissa bits (relative error <= 2^-4), below 2^-6 its spacing is 2^-9 (error <=
    # 2^-10), both in units of the block's power-of-two scale.
    assert ((back - w).abs() <= w.abs() * 2**-4 + step * 2**-10 + EPS).all()


def test_moe_banks_dequantize_per_expert() -> None:
    experts = [weight(32, 64, seed=e) for e in range(3)]
    int8 = [quantize_int8(w, group=16) for w in experts]
    bank = cq.dequantize_int8(
        torch.stack([q for q, _ in int8]), torch.stack([s for _, s in int8]).squeeze(-1), group=16
    )
    assert torch.equal(bank, torch.stack([cq.dequantize_int8(q, s, group=16) for q, s in int8]))
    fp4 = [quantize_nvfp4(w) for w in experts]
    stacked = [torch.stack([f[i] for f in fp4]) for i in range(3)]
    bank = cq.dequantize_nvfp4(*stacked)
    assert torch.equal(bank, torch.stack([cq.dequantize_nvfp4(*f) for f in fp4]))


def test_a_state_read_whole_is_dequantized_the_same_way() -> None:
    w = weight()
    stored = {**comfy_quant_state({"a.weight": w}, "int8_convrot"), "b": torch.ones(3)}
    read = cq.dequantize_loaded(stored, "x.safetensors")
    assert sorted(read) == ["a.weight", "b"]
    assert torch.equal(read["a.weight"], fake_quantized({"a.weight": w}, "int8_convrot")["a.weight"])


def _file(tmp_path: Path, state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> Path:
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(path), metadata=metadata)
    return path


def test_a_mixed_file_is_read_lazily_one_tensor_at_a_time(tmp_path: Path) -> None:
    state = {
        "a.weight": weight(seed=1),
        "b.weight": weight(seed=2),
        "c.weight": weight(seed=3),
        "n.weight": torch.ones(64),
    }
    quantized = {
        **comfy_quant_state({"a.weight": state["a.weight"]}, "int8_convrot"),
        **comfy_quant_state({"b.weight": state["b.weight"]}, "nvfp4", awq=lambda k: True),
        **comfy_quant_state({"c.weight": state["c.weight"]}, "fp8"),
        "n.weight": state["n.weight"],
    }
    path = _file(tmp_path, quantized)
    stubs = header_stubs(path)
    assert sorted(stubs) == sorted(state)  # scales and markers are gone: only the model's tensors
    assert all(stubs[k].shape == state[k].shape for k in state)
    key_map = trace_conversion(path, dict)
    assert key_map["b.weight"].keys == ("b.pre_quant_scale", "b.weight", "b.weight_scale", "b.weight_scale_2")
    assert key_map["n.weight"].is_rename
    read = KeyMapTensors(path, key_map)
    for name in ("a.weight", "b.weight", "c.weight"):
        fmt = {"a.weight": "int8_convrot", "b.weight": "nvfp4", "c.weight": "fp8"}[name]
        expected = fake_quantized({name: state[name]}, fmt, awq=lambda k: True)[name]
        assert torch.equal(read[name], expected)  # the same ops on the same stored bytes
    assert file_form(path) == "int8_tensorwise convrot x1, nvfp4 x1, float8_e4m3fn x1, dequantized"


def test_the_older_quantization_metadata_form_is_read(tmp_path: Path) -> None:
    w = weight()
    stored = comfy_quant_state({"x.a.weight": w}, "nvfp4")
    del stored["x.a.comfy_quant"]
    layers = {"format_version": "1.0", "layers": {"x.a": {"format": "nvfp4"}}}
    path = _file(tmp_path, stored, {cq.METADATA_KEY: json.dumps(layers)})
    assert torch.equal(
        KeyMapTensors(path, trace_conversion(path, dict))["x.a.weight"],
        fake_quantized({"x.a.weight": w}, "nvfp4")["x.a.weight"],
    )


@pytest.mark.parametrize(
    ("conf", "said"),
    [
        ({"format": "convrot_w4a4", "convrot_groupsize": 256}, "'convrot_w4a4'"),
        ({"convrot": True, "per_row": True}, "none (the marker has no 'format')"),
    ],
)
def test_an_unreadable_format_is_refused_naming_file_tensor_and_format(
    tmp_path: Path, conf: dict, said: str
) -> None:
    state = {
        "blocks.0.attn.weight": torch.zeros(4, 8, dtype=torch.int8),
        "blocks.0.attn.weight_scale": torch.ones(4),
        "blocks.0.attn.comfy_quant": marker(conf),
    }
    path = _file(tmp_path, state)
    with pytest.raises(cq.QuantFormatError) as info:
        header_stubs(path)
    message = str(info.value)
    assert message.startswith("model.safetensors: tensor blocks.0.attn.weight is quantized as " + said)
    assert "\n" not in message and "int8_tensorwise" in message  # one line, saying what is read
