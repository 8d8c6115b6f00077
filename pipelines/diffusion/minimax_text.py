"""MiniMax H3 prompt encoding: the folder's Qwen3-VL read at `hidden_states[50]`, with keyframes labelled
and shown to it for image-to-video.

Lives here: `encode_minimax`, `minimax_text_working`, `minimax_token_count`, `minimax_presentation`,
`TEXT_ENCODER_LAYER`, `image_processor_of`. May import: stdlib, torch, transformers, memory (and
memory.estimates), pipelines.diffusion.values / lora / prompt_weights / working / zimage_text /
minimax_layout / qwen_vl_counts.

Adapted from diffusers' `MiniMaxH3TextEncoderStep` and `MiniMaxH3FL2VATextEncoderStep` with
`get_qwen3vl_prompt_embeds`: the prompt is tokenized verbatim (no chat template, no special tokens, no
padding, no truncation); with keyframes, each one is preceded by `"<Picture i>: "` and a vision block
(`<|vision_start|>`, one `<|image_pad|>` per merged patch, `<|vision_end|>`) whose rows are tagged as video.
The language model runs with an all-ones mask and the Qwen-internal token types (1 on image pads), and the
hidden state after decoder layer 50 is the conditioning. The checkpoint is guidance-distilled: a negative
prompt is never used. The working memory is declared from `minimax_token_count` (the keyframes' grids and
the token counts from the folder's configs and tokenizer.json), and the tokenizer and image processor run
inside the model use, where `app plan` stops: transformers' imports cost it seconds.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from memory import MemoryManager, Working
from memory.estimates import activation_bytes
from pipelines.diffusion.lora import use_text_encoder
from pipelines.diffusion.minimax_layout import TEXT_TAG, VIDEO_TAG
from pipelines.diffusion.prompt_weights import strip_weights
from pipelines.diffusion.qwen_vl_counts import picture_grid, vision_settings
from pipelines.diffusion.values import Conditioning, TextEncoderRef
from pipelines.diffusion.working import chat_encoder_activations
from pipelines.diffusion.zimage_text import text_encoder_config

TEXT_ENCODER_LAYER = 50  # MiniMaxH3ModularPipeline.text_encoder_layer: the last layer is post-norm


def image_processor_of(ref: TextEncoderRef) -> Any:
    """The folder's Qwen2-VL image processor (`processor/`), PIL-based (no torchvision needed)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = ref.tokenizers[0].path / "processor"
    if not (folder / "preprocessor_config.json").is_file():
        raise FileNotFoundError(f"{folder}: no preprocessor_config.json (the keyframes' image processor)")
    return Qwen2VLImageProcessorPil.from_pretrained(str(folder))


def minimax_text_working(config: dict[str, Any], tokens: int, dtype: torch.dtype) -> Working:
    """The language model over the presentation: every hidden state kept (output_hidden_states) and one
    layer's SwiGLU, as the chat-LLM formula counts them, without its KV cache (the call passes
    use_cache=False). Measured on Qwen3-VL-32B's text widths (64 layers) at 64 to 2048 tokens
    (tests/test_family_minimax_working.py): 1.015x of the live tensors."""
    terms = [
        t for t in chat_encoder_activations(config.get("text_config", config), tokens) if t.what != "KV cache"
    ]
    assert len(terms) == 3, [t.what for t in terms]  # the names `chat_encoder_activations` gives
    large = activation_bytes(terms, batch=1, dtype=dtype)
    return Working(large + large // 64, f"1x{tokens}")  # the small tensors beside them


def minimax_token_count(ref: TextEncoderRef, text: str, keyframes: tuple[Any, ...] = ()) -> int:
    """The length of the presentation `encode_minimax` builds (`text` without weighting; the keyframes as
    PIL pictures), from the pictures' sizes, `processor/preprocessor_config.json` and the tokenizer.json:
    no transformers import."""
    source = ref.tokenizers[0]
    counter = source.counter()
    count = counter.count(text, special_tokens=False)
    if keyframes:
        settings = vision_settings(source.path / "processor", "the keyframes' image processor")
        for index, picture in enumerate(keyframes):
            label = counter.count(f"<Picture {index + 1}>: ", special_tokens=False)
            merged = math.prod(picture_grid(settings, *picture.size)) // settings.merge_size**2
            count += label + merged + 2  # the vision block: start, one pad per merged patch, end
    return count


def minimax_presentation(
    ref: TextEncoderRef, text: str, keyframes: tuple[Any, ...]
) -> tuple[list[int], list[int], dict[str, torch.Tensor], Any]:
    """The language model's ids and their modality tags (each keyframe's label and vision block, then the
    prompt verbatim), the keyframes' vision features, and the tokenizer."""
    tokenizer = ref.tokenizers[0].load()

    # 1. The keyframes' vision features (the presentation is text only without them)
    vision: dict[str, torch.Tensor] = {}
    ids: list[int] = []
    tags: list[int] = []
    if keyframes:
        processor = image_processor_of(ref)
        features = processor(images=list(keyframes), return_tensors="pt")
        grid = features["image_grid_thw"]
        vision = {"pixel_values": features["pixel_values"], "image_grid_thw": grid}
        merge = processor.merge_size**2
        for index in range(len(keyframes)):
            label = tokenizer(f"<Picture {index + 1}>: ", add_special_tokens=False)["input_ids"]
            block = (
                [tokenizer.convert_tokens_to_ids("<|vision_start|>")]
                + [tokenizer.convert_tokens_to_ids("<|image_pad|>")] * (int(grid[index].prod()) // merge)
                + [tokenizer.convert_tokens_to_ids("<|vision_end|>")]
            )
            ids += label + block
            tags += [TEXT_TAG] * len(label) + [VIDEO_TAG] * len(block)

    # 2. The prompt verbatim
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids += prompt
    tags += [TEXT_TAG] * len(prompt)
    return ids, tags, vision, tokenizer


@torch.no_grad()
def encode_minimax(
    mm: MemoryManager, ref: TextEncoderRef, text: str, keyframes: tuple[Any, ...] = ()
) -> Conditioning:
    """`keyframes`: PIL pictures already on the canvas, in packed order (first, then last)."""
    text = strip_weights(text)  # Qwen takes plain text
    tokens = minimax_token_count(ref, text, keyframes)
    if not tokens:
        raise ValueError("field 'text': MiniMax H3 needs a prompt (it has no token to condition on)")
    config = text_encoder_config(ref)
    layers = int(config.get("text_config", config).get("num_hidden_layers", 64))
    if layers < TEXT_ENCODER_LAYER:
        raise ValueError(
            f"input 'text_encoder': MiniMax H3 reads hidden_states[{TEXT_ENCODER_LAYER}] of its Qwen3-VL, which "
            f"has only {layers} decoder layers"
        )
    # ComfyUI's Qwen3-VL-32B file stops after layer 50: its last hidden state is then the final norm's input.
    truncated = layers == TEXT_ENCODER_LAYER
    working = minimax_text_working(config, tokens, ref.dtype)
    with use_text_encoder(mm, ref, 0, working=working) as te:
        # The presentation, built here in the use: `app plan` stops at the use, before transformers' imports
        ids, tags, vision, tokenizer = minimax_presentation(ref, text, keyframes)
        input_ids = torch.tensor([ids], dtype=torch.long, device=mm.device)
        image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        video_pad = tokenizer.convert_tokens_to_ids("<|video_pad|>")
        token_types = (input_ids == image_pad).long() + 2 * (input_ids == video_pad).long()
        seen: list[torch.Tensor] = []
        hook = None
        if truncated:  # the final norm's input: the hidden state after the last (50th) layer
            norm = next(m for n, m in te.model.named_modules() if n.endswith("language_model.norm"))
            hook = norm.register_forward_pre_hook(lambda _, args: seen.append(args[0]))
        kwargs = {
            k: (v.to(mm.device, te.dtype) if k.startswith("pixel_") else v.to(mm.device))
            for k, v in vision.items()
        }
        try:
            out = te.model(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                mm_token_type_ids=token_types,
                use_cache=False,
                output_hidden_states=True,
                **kwargs,
            )
        finally:
            if hook is not None:
                hook.remove()
        embeds = (seen[-1] if truncated else out.hidden_states[TEXT_ENCODER_LAYER]).to(dtype=te.dtype)
    return Conditioning(
        embeds=embeds.cpu(),
        family=ref.family.name,
        text=text,
        token_tags=torch.tensor(tags, dtype=torch.long),
    )
