"""Qwen-Image 2.1's memory facts at full size, on the meta device: the sampler's working-memory formula against
what a whole denoising loop of the published-width transformer keeps alive (tests/live_tensors.py), and the
declared blocks that let `stream` hold the transformer and the Qwen3-VL-8B text encoder in a small budget.

The transformer's forward reads tensor values to lay out its joint sequence (which positions are image slots,
where each image block starts); those inputs (`img_mask`) stay on the CPU, and the one place they meet a meta
tensor (the modulation row choice) gets the mask moved to the meta device. Everything that holds memory runs
on meta.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.values import DenoiserRef
from tests.family_support import block_sizes

META = torch.device("meta")


def _loop_peak(model: torch.nn.Module, h: int, w: int, text: int, refs: tuple, prompts: int) -> int:
    """The peak of a 2-step loop as `sample_qwenimage21` runs it: each prompt's first call fills its own KV
    cache (both alive under CFG), then each prompt's cached call."""
    from diffusers.models.transformers import transformer_qwenimage21 as mod

    from tests.live_tensors import live_tensor_peak

    ref_tokens = sum(a * b for a, b in refs)
    slots = ref_tokens // 4
    x = torch.zeros(1, ref_tokens + h * w, 64, device=META)
    embeds = torch.zeros(1, text + slots, 4096, device=META)
    image_slots = torch.zeros(1, text + slots, dtype=torch.bool)
    image_slots[0, 10 : 10 + slots] = True  # the pictures' slots sit inside the user turn, after the template
    img_mask = torch.cat([image_slots, torch.ones(1, h * w // 4, dtype=torch.bool)], dim=1)
    shapes = [[*[(1, a, b) for a, b in refs], (1, h, w)]]
    select = mod._select_modulation_rows

    def moved(params: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return select(params, None if mask is None else mask.to(params.device))

    def loop() -> None:
        caches = [mod.QwenImage21KVCache(len(model.transformer_blocks)) for _ in range(prompts)]
        for mode in ("extract", "cached"):
            for cache in caches:
                model(
                    hidden_states=x,
                    encoder_hidden_states=embeds,
                    timestep=torch.zeros(1, device=META),
                    img_shapes=shapes,
                    img_mask=img_mask,
                    kv_cache=cache,
                    kv_cache_mode=mode,
                    return_dict=False,
                )

    with mock.patch.object(mod, "_select_modulation_rows", moved):
        return live_tensor_peak(model, loop)


@pytest.mark.slow  # 0.5-3 s a case on the meta device
@pytest.mark.parametrize(
    ("pixels", "text", "refs", "prompts"),
    [
        (1024, 200, (), 1),  # text to image, Turbo (no guidance)
        (1024, 512, (), 2),  # a long prompt under true CFG
        (1536, 300, (), 1),
        (1024, 200, ((64, 64),), 2),  # an edit of one 1024 x 1024 picture under CFG: two large caches
        (1024, 200, ((64, 64), (48, 80)), 1),  # two pictures
    ],
)
@pytest.mark.parametrize("layers", [2, 4])
def test_working_memory_formula_covers_a_full_width_loop(
    pixels: int, text: int, refs: tuple, prompts: int, layers: int
) -> None:
    """The published width (32 heads of 128, Qwen3-VL-8B's 4096-wide states) at 2 and 4 blocks: the caches
    grow with the depth, the call does not, so both terms are checked."""
    from diffusers import QwenImage21Transformer2DModel

    from pipelines.diffusion.qwenimage21_working import qwenimage21_working_bytes

    with META:
        model = QwenImage21Transformer2DModel(num_layers=layers)
    h = w = pixels // 16
    measured = _loop_peak(model, h, w, text, refs, prompts)
    ref = DenoiserRef(None, FAMILIES["qwenimage21"], dict(model.config), {}, torch.float32)  # type: ignore[arg-type]
    ref_tokens = sum(a * b for a, b in refs)
    formula = qwenimage21_working_bytes(ref, h, w, 1, text + ref_tokens // 4, ref_tokens, prompts=prompts)
    print(
        f"qwenimage21 working {pixels}px text {text} refs {refs} x{prompts} {layers} blocks: {formula / measured:.3f}x"
    )
    # Never below what is alive (a budget would be overrun), at most 15% above (streaming keeps fewer blocks).
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"


def test_declared_blocks_let_stream_hold_the_full_size_transformer_in_a_small_budget() -> None:
    """The published transformer (the class defaults: 32 blocks of 4096, about 8B) on the meta device: outside
    the declared blocks little is left, and no block is a large share."""
    from diffusers import QwenImage21Transformer2DModel

    with META:
        model = QwenImage21Transformer2DModel()
    blocks, total, sizes = block_sizes(model, FAMILIES["qwenimage21"].denoiser_blocks)
    assert len(blocks) == 32
    assert max(sizes) < 0.04 * total and total - sum(sizes) < 0.05 * total


def test_the_text_encoder_declares_its_layers_at_full_size() -> None:
    """Qwen3-VL-8B's published widths on the meta device: the declared language and vision blocks cover all
    but the embedding table and the LM head, so `stream` can hold the encoder in a small budget."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    text = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32)
    text |= dict(num_key_value_heads=8, head_dim=128, vocab_size=151936)
    vision = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=4096)
    vision |= dict(patch_size=16, spatial_merge_size=2, deepstack_visual_indexes=[8, 16, 24])
    with META:
        encoder = Qwen3VLForConditionalGeneration(Qwen3VLConfig(text_config=text, vision_config=vision))
    blocks, total, sizes = block_sizes(encoder, FAMILIES["qwenimage21"].text_encoders[0].blocks)
    assert len(blocks) == 36 + 27
    # Outside the blocks: the 151936 x 4096 embedding table and LM head (7% each) and small parts (16% in all).
    assert max(sizes) < 0.03 * total and total - sum(sizes) < 0.17 * total


@pytest.mark.slow  # builds the full-size transformer and Qwen3-VL-8B on the meta device (~5 s)
def test_a_released_size_file_in_comfyui_names_picks_its_shipped_config() -> None:
    """A transformer file of the released size in ComfyUI's names (SwiGLU halves fused) fits the shipped
    released config, Turbo's when its name says so (the shapes are the same); the text encoder (Qwen3-VL-8B)
    and VAE configs build."""
    from accelerate import init_empty_weights

    from pipelines.diffusion.assembly import read_json
    from pipelines.diffusion.comfy_layouts.keys import transformer_from_diffusers, transformer_to_diffusers
    from pipelines.diffusion.comfy_layouts.qwen21 import by_name, scheduler_config
    from pipelines.diffusion.comfy_layouts.variants import (
        folder_of,
        module_shapes,
        pick_variant,
        variants_for,
    )
    from pipelines.quant.split import module_factory

    fam = FAMILIES["qwenimage21"]
    candidates = variants_for(["qwenimage21"])
    [base] = [v for v in candidates if v.name == "qwen-image-2.1"]
    with init_empty_weights():
        model = fam.denoiser_class.from_config(read_json(base.folder / "transformer" / "config.json"))
    comfy = transformer_from_diffusers("qwenimage21", model.state_dict())
    assert any(".img_mlp.gate_up." in k for k in comfy)
    shapes = {k: tuple(v.shape) for k, v in transformer_to_diffusers("qwenimage21", comfy).items()}

    def wanted(v: object) -> dict:
        c = read_json(folder_of(v) / "transformer" / "config.json")
        return module_shapes(lambda: fam.denoiser_class.from_config(c))

    for name, folder in (
        ("qwen_image_2.1_bf16.safetensors", "qwen-image-2.1"),
        ("qwen_image_2.1_turbo_int8_convrot.safetensors", "qwen-image-2.1-turbo"),
    ):
        picked = pick_variant(by_name(candidates, name), shapes, wanted, what="transformer", file_name=name)
        assert picked.name == folder
        assert bool(scheduler_config(picked.folder).get("sample_sigmas")) == ("turbo" in folder)
    slot = fam.text_encoders[0]
    assert module_shapes(module_factory(slot.model_class, base.folder / slot.subfolder))
    assert module_shapes(lambda: fam.vae_class.from_config(read_json(base.folder / "vae" / "config.json")))


@pytest.mark.slow  # ~1 s a case on the meta device
@pytest.mark.parametrize("tokens", [100, 600])
def test_the_text_prompt_formula_covers_qwen3vl_8b(tokens: int) -> None:
    """A text prompt through Qwen3-VL-8B's widths (12 of its 36 layers) as `encode_qwenimage21` calls it: every
    hidden state kept, logits at every position, the final norm bypassed by a hook. The mask is left out and
    the positions are given (transformers' mask and rope code read tensor values, which meta has none of)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from pipelines.diffusion.qwenimage_text import qwenimage_text_working_bytes
    from tests.live_tensors import live_tensor_peak

    text = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=12, num_attention_heads=32)
    text |= dict(num_key_value_heads=8, head_dim=128, vocab_size=151936)
    vision = dict(depth=1, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=4096)
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={**vision, "deepstack_visual_indexes": [0]},
        attn_implementation="sdpa",
    )
    with META:
        model = Qwen3VLForConditionalGeneration(config)
    ids = torch.zeros(1, tokens, dtype=torch.long, device=META)
    positions = torch.arange(tokens, device=META).view(1, 1, -1).expand(3, 1, -1)

    def call() -> torch.Tensor:
        norm = model.model.language_model.norm
        handle = norm.register_forward_hook(lambda module, args, output: args[0])
        try:
            return model(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states[-1]
        finally:
            handle.remove()

    measured = live_tensor_peak(model, call)
    formula = qwenimage_text_working_bytes(config.to_dict(), tokens, torch.float32)
    print(f"qwenimage21 text encoder working, {tokens} tokens: {formula / measured:.3f}x")
    assert measured <= formula <= 1.15 * measured, f"{formula / measured:.3f}x of {measured / 2**20:.0f} MiB"
