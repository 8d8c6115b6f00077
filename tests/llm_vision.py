"""Tiny Qwen2.5-VL and Qwen3-VL models as transformers folders, and transformers' own processors for them (no
tests here).

Lives here: `VL_FAMILIES`, `QWEN25_VL_CHAT_TEMPLATE`, `tiny_vl_model`, `write_vl_folder`, `reference_processor`,
`picture`. Imports transformers, torch, numpy, PIL and the Qwen-Image demo's offline tokenizer and processor
helpers (pipelines.diffusion.demo_qwenimage*). The folder goes into the test's tmp dir, never committed.

Random weights from a config with a fixed seed (text: 2 layers of 64, 4 heads, 2 kv heads, 3-D rotary sections;
Qwen2.5-VL's vision tower: 2 blocks of 32, one windowed and one full, 14 px patches merged 2x2; Qwen3-VL's: 2
blocks, 16 px patches, learned position embeddings, a deepstack feature from block 0 into the text), scaled
up from the init so greedy picks are not near-ties and the picture's tokens move the answer. The tokenizer is
the Qwen-Image demo's byte-level BPE trained offline with `tokenizers`, with Qwen2-VL's special tokens
(`<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>`, `<|im_start|>`, `<|im_end|>`), and Qwen2.5-VL's
shipped chat template cut to text and image turns (its video branch left out).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import (
    PreTrainedModel,
    ProcessorMixin,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
)

VL_FAMILIES = ("qwen2.5-vl", "qwen3-vl")

QWEN25_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
    "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> Any:
    from pipelines.diffusion.demo_qwenimage import tiny_qwenimage_tokenizer

    tokenizer = tiny_qwenimage_tokenizer()
    tokenizer.chat_template = QWEN25_VL_CHAT_TEMPLATE
    return tokenizer


def tiny_image_processor(family: str = "qwen2.5-vl") -> Any:
    """Qwen2-VL's PIL image processor (2x2 merge; Qwen2.5-VL: 14 px patches, CLIP mean/std; Qwen3-VL: 16 px,
    mean/std 0.5), pictures kept small."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if family == "qwen3-vl":
        return Qwen2VLImageProcessorPil(
            patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3, min_pixels=64 * 64, max_pixels=128 * 128
        )
    return Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)


def _ids(tokenizer: Any) -> dict[str, int]:
    names = ("<|endoftext|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
    return {t: tokenizer.convert_tokens_to_ids(t) for t in names}


def _scale_up(model: PreTrainedModel) -> PreTrainedModel:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # larger than the init: logits not all near-ties, pictures that matter
                p.normal_(0, 0.3 if "visual" not in name else 0.15)
    return model.eval()


def tiny_vl_model(family: str, tokenizer: Any, seed: int = 0) -> PreTrainedModel:
    if family == "qwen2.5-vl":
        return tiny_qwen25_vl_model(tokenizer, seed)
    ids = _ids(tokenizer)
    config = Qwen3VLConfig(
        text_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 512,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5000000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
            "vocab_size": len(tokenizer),
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 16,
            "num_position_embeddings": 64,  # an 8x8 table, interpolated to each picture's grid
            "deepstack_visual_indexes": [0],
        },
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|image_pad|>"],  # no video token in the tiny vocabulary; never used
    )
    torch.manual_seed(seed)
    return _scale_up(Qwen3VLForConditionalGeneration(config))


def tiny_qwen25_vl_model(tokenizer: Any, seed: int = 0) -> Qwen2_5_VLForConditionalGeneration:
    ids = _ids(tokenizer)
    config = Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
            "vocab_size": len(tokenizer),
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "fullatt_block_indexes": [1],  # block 0 windowed, block 1 full
        },
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|image_pad|>"],  # no video token in the tiny vocabulary; never used
    )
    torch.manual_seed(seed)
    return _scale_up(Qwen2_5_VLForConditionalGeneration(config))


def write_vl_folder(family: str, folder: Path, tokenizer: Any, seed: int = 0) -> PreTrainedModel:
    """Model (safetensors) + generation config + tokenizer + preprocessor_config.json in `folder`."""
    model = tiny_vl_model(family, tokenizer, seed)
    model.generation_config.eos_token_id = model.config.text_config.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tiny_image_processor(family).save_pretrained(folder)
    return model


def reference_processor(folder: Path, family: str = "qwen2.5-vl") -> Any:
    """transformers' `Qwen2VLProcessor` / `Qwen3VLProcessor` over the folder's image processor and tokenizer,
    without a video processor (its class needs torchvision: the argument check is skipped for it, as in
    pipelines/diffusion/demo_qwenimage_edit.py)."""
    from unittest import mock

    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    check = ProcessorMixin.check_argument_for_proper_class

    def skip_missing_video(self: ProcessorMixin, name: str, argument: Any) -> Any:
        return None if name == "video_processor" and argument is None else check(self, name, argument)

    cls = Qwen3VLProcessor if family == "qwen3-vl" else Qwen2VLProcessor
    with mock.patch.object(ProcessorMixin, "check_argument_for_proper_class", skip_missing_video):
        return cls(
            image_processor=Qwen2VLImageProcessorPil.from_pretrained(str(folder)),
            tokenizer=AutoTokenizer.from_pretrained(str(folder)),
            video_processor=None,
            chat_template=QWEN25_VL_CHAT_TEMPLATE,
        )


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (84, 56)) -> Path:
    """A PNG of coloured blocks (not noise: the processor resizes it), `size` = (width, height)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)
    image = Image.fromarray(blocks).resize(size, Image.NEAREST)
    image.save(path)
    return path
