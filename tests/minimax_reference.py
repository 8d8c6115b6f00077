"""The reference side of the MiniMax H3 tests: diffusers' `MiniMaxH3ModularPipeline` (the family's only
pipeline) built from a saved folder's own components.

Lives here: `reference_pipeline`, `reference_video`. May import: stdlib, numpy, torch, transformers, diffusers.

diffusers has no `from_pretrained` path that works here: the pipeline's `processor` is a `Qwen3VLProcessor`,
whose video half needs torchvision (not installed). The processor is therefore assembled from the folder's
tokenizer and image processor without its constructor's class checks; the t2va and fl2va blocks use only
`create_mm_token_type_ids` and `image_processor` of it, which are the library's own code either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def reference_pipeline(folder: Path) -> Any:
    from diffusers import (
        AutoencoderKLMiniMaxH3,
        AutoencoderKLMiniMaxH3Audio,
        MiniMaxH3Scheduler,
        MiniMaxH3Transformer3DModel,
    )
    from diffusers.modular_pipelines import MiniMaxH3Blocks
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    processor = Qwen3VLProcessor.__new__(Qwen3VLProcessor)
    processor.tokenizer = tokenizer
    processor.image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(folder / "processor"))
    processor.video_processor = None
    processor.image_token_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    processor.video_token_id = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    pipe = MiniMaxH3Blocks().init_pipeline()
    pipe.update_components(
        transformer=MiniMaxH3Transformer3DModel.from_pretrained(str(folder / "transformer")),
        vae=AutoencoderKLMiniMaxH3.from_pretrained(str(folder / "vae")),
        audio_vae=AutoencoderKLMiniMaxH3Audio.from_pretrained(str(folder / "audio_vae")),
        text_encoder=Qwen3VLForConditionalGeneration.from_pretrained(
            str(folder / "text_encoder"), dtype=torch.float32
        ),
        tokenizer=tokenizer,
        processor=processor,
        scheduler=MiniMaxH3Scheduler.from_pretrained(str(folder / "scheduler")),
        audio_scheduler=MiniMaxH3Scheduler.from_pretrained(str(folder / "audio_scheduler")),
    )
    return pipe


def reference_video(
    folder: Path, shifts: tuple[float, float] | None = None, **inputs: Any
) -> tuple[np.ndarray, torch.Tensor, int]:
    """(frames (T, H, W, 3) uint8, waveform (2, samples), sample rate) of one pipeline call, seed 42;
    `shifts`: the (video, audio) schedules' shifts instead of the folder's (`MiniMaxH3Scheduler.set_shift`)."""
    pipe = reference_pipeline(folder)
    if shifts is not None:
        pipe.scheduler.set_shift(shifts[0])
        pipe.audio_scheduler.set_shift(shifts[1])
    state = pipe(generator=torch.Generator("cpu").manual_seed(42), output_type="np", **inputs)
    frames = (np.asarray(state.get("videos"))[0] * 255).round().astype(np.uint8)
    return frames, state.get("audio")[0].float(), int(state.get("sampling_rate"))
