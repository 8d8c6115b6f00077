"""A tiny Qwen2.5-VL as a transformers model folder, and transformers' own processor for it (no tests here).

Lives here: `QWEN25_VL_CHAT_TEMPLATE`, `tiny_qwen25_vl_model`, `write_qwen25_vl_folder`, `reference_processor`,
`picture`. Imports transformers, torch, numpy, PIL and the Qwen-Image demo's offline tokenizer and processor
helpers (pipelines.diffusion.demo_qwenimage*). The folder goes into the test's tmp dir, never committed.

Random weights from a config with a fixed seed (text: 2 layers of 64, 4 heads, 2 kv heads, Qwen2.5-VL's 3-D
rotary sections; vision tower: 2 blocks of 32, one windowed and one full, 14 px patches merged 2x2), scaled
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
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

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


def tiny_image_processor() -> Any:
    """Qwen2-VL's PIL image processor (14 px patches, 2x2 merge, CLIP mean/std), pictures kept small."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)


def tiny_qwen25_vl_model(tokenizer: Any, seed: int = 0) -> Qwen2_5_VLForConditionalGeneration:
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<|vision_start|>")}
    ids |= {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_end|>", "<|image_pad|>")}
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
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # larger than the init: logits not all near-ties, pictures that matter
                p.normal_(0, 0.3 if "visual" not in name else 0.15)
    return model


def write_qwen25_vl_folder(folder: Path, seed: int = 0) -> Qwen2_5_VLForConditionalGeneration:
    """Model (safetensors) + generation config + tokenizer + preprocessor_config.json in `folder`."""
    tokenizer = tiny_tokenizer()
    model = tiny_qwen25_vl_model(tokenizer, seed)
    model.generation_config.eos_token_id = model.config.text_config.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tiny_image_processor().save_pretrained(folder)
    return model


def reference_processor(folder: Path) -> Any:
    """transformers' `Qwen2VLProcessor` over the folder's image processor and tokenizer (no video processor:
    its class needs torchvision, see pipelines/diffusion/demo_qwenimage_edit.py)."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from pipelines.diffusion.demo_qwenimage_edit import qwen2vl_processor

    processor = qwen2vl_processor(
        Qwen2VLImageProcessorPil.from_pretrained(str(folder)), AutoTokenizer.from_pretrained(str(folder))
    )
    processor.chat_template = QWEN25_VL_CHAT_TEMPLATE
    return processor


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (84, 56)) -> Path:
    """A PNG of coloured blocks (not noise: the processor resizes it), `size` = (width, height)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)
    image = Image.fromarray(blocks).resize(size, Image.NEAREST)
    image.save(path)
    return path
