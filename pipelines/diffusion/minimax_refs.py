"""MiniMax H3 reference to video (ref2va) with reference pictures: their sizes, their latents and the packed
layout that carries them.

Lives here: `REFERENCE_ANCHOR`, `MAX_REFERENCE_PICTURES`, `REF_IMAGE_SIZES`, `reference_size`,
`prepare_reference`, `is_ref2va`, `ref2va_denoiser`, `build_ref2va_packed_sequence`, `reference_to_video`.
May import: stdlib, math, torch, PIL, pipelines.diffusion.values / minimax_layout / minimax_vae / minimax_text.

What ref2va is (diffusers' `MiniMaxH3Ref2VA*` steps, ComfyUI's `MiniMaxH3ReferenceToVideo`): each reference
picture is shown to Qwen3-VL after a `<Picture i>: ` label (the fl2va presentation: `minimax_text`), encoded by
the video VAE *at its own size* (one latent frame, posterior sampled at seed 42, rounded through float16,
`minimax_vae.keyframe_minimax_latent`), noised to t = 0.999 and held there, never stepped, exactly as a
keyframe anchor is. What differs from fl2va is the layout: the sequence is `[text | reference blocks | target
audio | target video]`, each picture at one integer rotary time step on its own spatial grid, and the target
rows start on the clock where the references left it; the transformer is the folder's `transformer_ref/`
partition (the same class, other weights). A picture reference travels in `Latents.keyframes` under the anchor
`REFERENCE_ANCHOR`, so both MiniMax loops (`minimax_sampling`, `minimax_k_sampling`) take it unchanged.

Sizes are ComfyUI's (comfy_extras/nodes_minimax_h3.py `_build_ref_blocks`): 'match' scales a picture down,
keeping its aspect, to the generation's pixel area; 'max' scales it down to a 2048 short edge (never up);
both round each side to the canvas multiple (the VAE's factor x the patch, 32 for the release) and stretch
with Lanczos. diffusers' setup step instead brings every picture to exactly a 2048 short edge, upscaling
included; for a picture already at a size both leave alone the two agree (the parity test's case).
Reference videos and sounds (ComfyUI's `ref_videos`, `ref_video_audios`, `ref_audios`) are not done here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from pipelines.diffusion.minimax_layout import (
    MINIMAX_H3_AUDIO_CHANNELS,
    PackedLayout,
    _frame_position_grid,
    _temporal_position_grid,
    packed_layout,
)
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents, TextEncoderRef, VaeRef

REFERENCE_ANCHOR = "reference"  # a ref2va picture in Latents.keyframes (fl2va's are "first" / "last")
MAX_REFERENCE_PICTURES = 9  # MiniMax H3's documented limit (diffusers' and ComfyUI's)
REF_IMAGE_SIZES = ("match", "max")  # ComfyUI's `ref_image_size`
REF_IMAGE_SHORT_EDGE = 2048  # 'max': the reference pipeline's short edge


def reference_size(
    picture_width: int, picture_height: int, width: int, height: int, multiple: int, mode: str
) -> tuple[int, int]:
    """(width, height) a reference picture is encoded at, as ComfyUI's node sizes it: scaled down only, to the
    generation's pixel area ('match') or a 2048 short edge ('max'), each side rounded to `multiple`."""
    if mode == "match":
        scale = min(1.0, math.sqrt((width * height) / (picture_width * picture_height)))
    elif mode == "max":
        scale = min(1.0, REF_IMAGE_SHORT_EDGE / min(picture_width, picture_height))
    else:
        raise ValueError(f"field 'ref_image_size': one of {', '.join(REF_IMAGE_SIZES)}, got {mode!r}")
    return (
        max(multiple, round(picture_width * scale / multiple) * multiple),
        max(multiple, round(picture_height * scale / multiple) * multiple),
    )


def prepare_reference(image: torch.Tensor, width: int, height: int, multiple: int, mode: str) -> Any:
    """An IMAGE batch's first picture at its reference size (a PIL picture, Lanczos-stretched when resized)."""
    from PIL import Image

    if image.ndim != 4 or image.shape[-1] != 3:
        raise ValueError(f"expected an IMAGE (batch, height, width, 3), got {tuple(image.shape)}")
    pixels = (image[0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()  # the picture LoadImage read
    picture = Image.fromarray(np.ascontiguousarray(pixels))
    w, h = picture.size
    if w > 4 * h or h > 4 * w:
        raise ValueError(f"a reference picture must be within 1:4 and 4:1, got {w}x{h}")
    size = reference_size(w, h, width, height, multiple, mode)
    return picture if picture.size == size else picture.resize(size, Image.Resampling.LANCZOS)


def is_ref2va(latents: Latents) -> bool:
    return any(anchor == REFERENCE_ANCHOR for anchor, _ in latents.keyframes)


def ref2va_denoiser(denoiser: DenoiserRef, latents: Latents) -> DenoiserRef:
    """The transformer a request runs: for ref2va, a folder's `transformer_ref/` partition with the wired
    denoiser's LoRAs and schedules; a denoiser without one is taken as the ref2va checkpoint itself (ComfyUI's
    `minimax_h3_ref2va_*` file, loaded by name), as ComfyUI runs whatever model is wired."""
    if not is_ref2va(latents) or denoiser.reference is None:
        return denoiser
    return replace(
        denoiser.reference,
        patches=denoiser.patches,
        scheduler_config=denoiser.scheduler_config,
        vae_scale_factor=denoiser.vae_scale_factor,
    )


def _fill_audio_positions(
    position_ids: torch.Tensor, rows: slice, latents: int, origin: float, width_grid: torch.Tensor
) -> None:
    """Audio rows channel-major on the clock from `origin`, pinned to the two ends of the width grid (diffusers'
    `_fill_audio_positions`)."""
    channels = MINIMAX_H3_AUDIO_CHANNELS
    time = origin + torch.arange(latents, dtype=torch.float64)
    position_ids[rows, 0] = time.repeat(channels)
    ends = [float(width_grid[0])] + [float(width_grid[-1])] * (channels - 1)
    position_ids[rows, 2] = torch.cat([torch.full((latents,), end, dtype=torch.float64) for end in ends])


def build_ref2va_packed_sequence(
    text_token_tags: torch.Tensor,
    reference_shapes: tuple[tuple[int, int, int], ...],
    num_latent_frames: int,
    latent_height: int,
    latent_width: int,
    num_audio_latents: int,
    patch_size: tuple[int, int, int],
) -> PackedLayout:
    """Adapted from diffusers' `MiniMaxH3Ref2VAPrepareLayoutStep.build_ref2va_packed_sequence` for picture
    references: `reference_shapes` are their latents' (frames, h, w), one latent frame each, in packed order.
    Each picture takes one integer rotary slot on its own spatial grid; the target audio and video rows start
    where the references left the clock."""
    _, patch_h, patch_w = patch_size
    num_text_tokens = text_token_tags.shape[0]
    for frames, _, _ in reference_shapes:
        if frames != 1:
            raise ValueError(f"a reference picture is one latent frame, got {frames}")
    reference_rows = sum(f * (h // patch_h) * (w // patch_w) for f, h, w in reference_shapes)
    rows_per_frame = (latent_height // patch_h) * (latent_width // patch_w)
    num_audio_rows = num_audio_latents * MINIMAX_H3_AUDIO_CHANNELS
    sequence_length = num_text_tokens + reference_rows + num_audio_rows + num_latent_frames * rows_per_frame

    position_ids = torch.zeros(sequence_length, 3, dtype=torch.float64)
    position_ids[:num_text_tokens, 0] = torch.arange(num_text_tokens, dtype=torch.float64)
    target_grid, target_width_grid = _frame_position_grid(latent_height, latent_width, patch_h, patch_w)

    # 1. Reference blocks in request order, each advancing the shared clock by one step
    cursor, rotary_time = num_text_tokens, float(num_text_tokens)
    for _, height, width in reference_shapes:
        rows = slice(cursor, cursor + (height // patch_h) * (width // patch_w))
        cursor = rows.stop
        frame_grid, _ = _frame_position_grid(height, width, patch_h, patch_w)
        position_ids[rows, 0] = rotary_time
        position_ids[rows, 1:] = frame_grid
        rotary_time += 1.0

    # 2. The generated rows, from the origin the references left behind
    audio_start = cursor
    video_start = audio_start + num_audio_rows
    _fill_audio_positions(
        position_ids, slice(audio_start, video_start), num_audio_latents, rotary_time, target_width_grid
    )
    frame_time = _temporal_position_grid(num_latent_frames, rotary_time)
    position_ids[video_start:, 0] = frame_time.repeat_interleave(target_grid.shape[0])
    position_ids[video_start:, 1:] = target_grid.repeat(num_latent_frames, 1)

    # 3. Row indices (reference rows first among the video rows) and modality tags
    return packed_layout(
        position_ids, text_token_tags, num_text_tokens, audio_start, video_start, reference_rows
    )


def reference_to_video(
    mm: Any,
    text_encoder: TextEncoderRef,
    vae: VaeRef,
    denoiser: DenoiserRef | None,
    text: str,
    pictures: list[tuple[str, torch.Tensor]],
    width: int,
    height: int,
    frames: int,
    mode: str,
) -> tuple[Conditioning, Latents]:
    """MiniMax H3's ref2va request with reference pictures (`(input name, IMAGE)` in order): the prompt with
    each picture labelled and shown to Qwen3-VL, and the latent carrying them as reference anchors."""
    from pipelines.diffusion.minimax_text import encode_minimax
    from pipelines.diffusion.minimax_vae import geometry_of, keyframe_minimax_latent, minimax_latent_shapes

    geometry = geometry_of(vae, denoiser)
    minimax_latent_shapes(geometry, width, height, frames)  # the fields' errors before any model runs
    if not pictures:
        raise ValueError(
            "inputs 'ref_image_*': MiniMax H3 Reference to Video needs at least one reference picture "
            "(MiniMax H3 Image to Video makes text to video)"
        )
    if len(pictures) > MAX_REFERENCE_PICTURES:
        raise ValueError(
            f"MiniMax H3 takes at most {MAX_REFERENCE_PICTURES} reference pictures, got {len(pictures)}"
        )
    prepared = []
    for name, image in pictures:
        try:
            prepared.append(prepare_reference(image, width, height, geometry.canvas_multiple, mode))
        except ValueError as exc:
            raise ValueError(f"input '{name}': {exc}") from None
    conditioning = encode_minimax(mm, text_encoder, text, tuple(prepared))
    latent = keyframe_minimax_latent(
        mm, vae, denoiser, [(REFERENCE_ANCHOR, p) for p in prepared], width, height, frames
    )
    return conditioning, latent
