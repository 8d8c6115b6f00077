"""Streaming on CPU: blocks read from the safetensors files around their forward give the resident output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memory import ComponentSpec, MemoryConfig, MemoryManager
from memory.policies import StreamConfig, apply_streaming, remove_streaming


@pytest.fixture(scope="module")
def tiny_unet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        layers_per_block=1,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    out = tmp_path_factory.mktemp("unet")
    unet.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    cfg = CLIPTextConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4
    )
    out = tmp_path_factory.mktemp("clip")
    model = CLIPTextModel(cfg)
    model.save_pretrained(out)
    # Rewrite the weights the way older files have them, with a `text_model.` prefix the module lacks.
    from safetensors.torch import save_file

    for f in out.glob("*.safetensors"):
        f.unlink()
    save_file(
        {f"text_model.{k}": v.contiguous() for k, v in model.state_dict().items()}, out / "model.safetensors"
    )
    return out


def unet_spec(folder: Path, key: str = "unet") -> ComponentSpec:
    from diffusers import UNet2DConditionModel

    return ComponentSpec(
        key,
        "unet",
        "denoiser",
        lambda: UNet2DConditionModel.from_pretrained(folder).eval(),
        tuple(folder.glob("*.safetensors")),
        torch.float32,
        ("down_blocks", "up_blocks"),
    )


def unet_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, 4, 8, 8, generator=g), torch.tensor([10, 500]), torch.randn(2, 5, 32, generator=g)


@pytest.mark.parametrize("resident", [0, 1, 3])
def test_stream_unet_matches_resident(tiny_unet: Path, resident: int) -> None:
    from diffusers import UNet2DConditionModel

    x, t, ctx = unet_inputs()
    with torch.no_grad():
        want = UNet2DConditionModel.from_pretrained(tiny_unet).eval()(x, t, ctx).sample
        module = UNet2DConditionModel.from_pretrained(tiny_unet).eval()
        files = tuple(tiny_unet.glob("*.safetensors"))
        state = apply_streaming(
            module, StreamConfig(torch.device("cpu"), ("down_blocks", "up_blocks"), resident, files=files)
        )
        streamed = [b for b in state.blocks if not b.resident]
        assert len(streamed) == 4 - resident
        # Between calls a streamed block holds nothing.
        assert all(p.numel() == 0 for b in streamed for p in b.module.parameters())
        got = module(x, t, ctx).sample
        again = module(x, t, ctx).sample
        nbytes, _ = state.take_transfer_stats()
        assert nbytes == 2 * sum(b.nbytes for b in streamed)
        remove_streaming(module)
        after = module(x, t, ctx).sample
    assert torch.equal(got, want) and torch.equal(again, want) and torch.equal(after, want)


def test_stream_clip_maps_file_keys_with_another_prefix(tiny_clip: Path) -> None:
    # Older CLIP files carry a `text_model.` prefix that transformers 5's module names lack.
    from transformers import CLIPTextModel

    ids = torch.tensor([[1, 5, 7, 9, 2]])
    with torch.no_grad():
        want = CLIPTextModel.from_pretrained(tiny_clip).eval()(ids).last_hidden_state
        spec = ComponentSpec(
            "clip",
            "text_encoder",
            "text_encoder",
            lambda: CLIPTextModel.from_pretrained(tiny_clip).eval(),
            tuple(tiny_clip.glob("*.safetensors")),
            blocks=("encoder.layers",),
        )
        with MemoryManager(MemoryConfig(device="cpu", policy="stream", ram_budget="1GiB")) as mm:
            handle = mm.register(spec)
            with mm.use(handle) as module:
                assert handle.location == "device"  # the budget is ample: every block stays resident
                got = module(ids).last_hidden_state
            mm.ledger.device_budget = handle.weight_bytes  # now it isn't
            with mm.use(handle) as module:
                assert handle.location == "partial"
                tight = module(ids).last_hidden_state
    assert torch.equal(got, want) and torch.equal(tight, want)


def test_stream_policy_under_budget_through_manager(tiny_unet: Path) -> None:
    x, t, ctx = unet_inputs()
    with torch.no_grad():
        with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm:
            with mm.use(mm.register(unet_spec(tiny_unet))) as module:
                want = module(x, t, ctx).sample
        probe = MemoryManager(MemoryConfig(device="cpu"))
        size = probe.register(unet_spec(tiny_unet)).weight_bytes
        probe.close()
        budget = str(int(size * 0.85))
        with MemoryManager(MemoryConfig(device="cpu", policy="stream", ram_budget=budget)) as mm:
            handle = mm.register(unet_spec(tiny_unet))
            with mm.use(handle) as module:
                assert handle.location == "partial"
                assert mm.ledger.device_used() <= mm.budget
                got = module(x, t, ctx).sample
            assert handle.location == "disk"  # stream, like sequential, unloads after use
            transfers = mm.report()["transfers"]
    assert torch.equal(got, want)
    assert transfers and transfers[0]["nbytes"] > 0


def test_stream_fine_grained_lists_learn_the_interleaved_order(tiny_unet: Path) -> None:
    # resnets and attentions of one stage are declared as two lists but run interleaved.
    from diffusers import UNet2DConditionModel

    lists = (
        "down_blocks.0.resnets",
        "down_blocks.0.attentions",
        "down_blocks.1.resnets",
        "up_blocks.0.resnets",
        "up_blocks.1.resnets",
        "up_blocks.1.attentions",
    )
    x, t, ctx = unet_inputs()
    with torch.no_grad():
        want = UNet2DConditionModel.from_pretrained(tiny_unet).eval()(x, t, ctx).sample
        module = UNet2DConditionModel.from_pretrained(tiny_unet).eval()
        files = tuple(tiny_unet.glob("*.safetensors"))
        state = apply_streaming(module, StreamConfig(torch.device("cpu"), lists, 0, files=files))
        first = module(x, t, ctx).sample
        second = module(x, t, ctx).sample
    assert torch.equal(first, want) and torch.equal(second, want)
    order = ["down_blocks.0.resnets.0", "down_blocks.0.attentions.0"]
    assert state._next_streamed(state.blocks[[b.name for b in state.blocks].index(order[0])]).name == order[1]
