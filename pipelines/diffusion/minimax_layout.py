"""MiniMax H3's packed sequence: the geometry of a request and the row layout the transformer reads.

Lives here: `MiniMaxGeometry`, `minimax_geometry`, `PackedLayout`, `build_packed_sequence`, `packed_layout`,
`row_timesteps`, `unpatchify_video_rows`, the copied helpers (`align_num_frames`, `video_latent_num_frames`,
`audio_latent_num_frames`, `patchify_video_latents` and the rotary grids) and the model's constants
(`MINIMAX_H3_FPS`, the modality tags, `AUDIO_SCHEDULER_KEY`). May import: stdlib, numpy, torch.

MiniMax H3 denoises one sequence `[text | keyframe conditions | target audio | target video]` with full
self-attention; every row has a modality tag, a (t, h, w) rotary coordinate in float64 and a timestep index.
This is diffusers' `MiniMaxH3PrepareLayoutStep.build_packed_sequence` (t2va / fl2va), adapted to a plain
function; the helpers it calls are copied verbatim (checked by tests/test_copied_from.py). The geometry comes
from the folder's configs: pixels per latent are the video VAE's `spatial_downsample_factors`, the frame
chunking its `clip_length` and temporal factors, the patch the transformer's `patch_size`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# MiniMax H3 generates at a fixed 24 fps. Any 17n + 5 frames decode (5, 22, 39, 56, ...: the video VAE's
# chunks), and ComfyUI's nodes take a length of 5 to 3600 frames (shorter ones snapped up to 5). The 5 to 15 s
# (124 to 362 frames) of MiniMaxH3ModularPipeline's min/max_duration is the range the model was trained on
# ("trained range is ~124-362, longer is untested", ComfyUI's tooltip), a policy of that pipeline, not a limit
# of the VAE or the transformer: Nodeloom takes what ComfyUI takes.
MINIMAX_H3_FPS = 24
# The folder's audio_scheduler/scheduler_config.json travels inside the denoiser's scheduler config under this
# key (the loader puts it there: a DenoiserRef has one scheduler config). Here, not in minimax_sampling: the
# loader reads it while `app plan` runs, and that module imports diffusers' scheduler.
AUDIO_SCHEDULER_KEY = "_minimax_audio_scheduler"
MAX_FRAMES = 3600  # ComfyUI's `length` maximum (MiniMaxH3ImageToVideo, EmptyMiniMaxH3LatentAV)
# The audio VAE's latent rate (40 a second) and the stereo channels packed channel-major.
MINIMAX_H3_AUDIO_LATENTS_PER_SECOND = 40
MINIMAX_H3_AUDIO_CHANNELS = 2
# Per-row modality tags: they index the transformer's AdaLN table (a checkpoint contract).
VIDEO_TAG, TEXT_TAG, AUDIO_TAG = 0, 1, 2
# The `t` a keyframe anchor is held at (the released model's noise augmentation), and the seed its VAE
# posterior is sampled under (independent of the request's).
KEYFRAME_NOISE_AUG = 0.999
KEYFRAME_ENCODE_SEED = 42
# The video VAE's input normalisation (ImageNet's), the pipeline's `pixel_mean` / `pixel_std`.
PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)

# Rotary-time constants (before_denoise.py's): one latent frame spans 5/3 x (1, 4, 4, 4, 4) units.
_ROPE_FRAME_RESCALE = 5.0 / 3.0
_ROPE_FRAMES_PER_LATENT = (1, 4, 4, 4, 4)
_ROPE_SPATIAL_SCALE = 32


@dataclass(frozen=True)
class MiniMaxGeometry:
    """What a folder's configs say about sizes (the pipeline's config-derived properties)."""

    spatial: int  # pixels per latent (`vae_spatial_compression_ratio`)
    frames_per_chunk: int  # the VAE's `clip_length`
    latents_per_chunk: int  # `tokens_chunk_size`
    latent_channels: int
    audio_channels: int  # the audio VAE's latent channels
    patch: tuple[int, int, int]  # the transformer's (t, h, w) patch

    @property
    def canvas_multiple(self) -> int:
        """What width and height must be multiples of: the VAE's factor x the patch (32 for the release)."""
        return self.spatial * self.patch[2]


def minimax_geometry(
    vae_config: dict[str, Any], audio_config: dict[str, Any], denoiser_config: dict[str, Any] | None
) -> MiniMaxGeometry:
    spatial = math.prod(int(f) for f in vae_config.get("spatial_downsample_factors", (2, 2, 2, 2, 1, 1)))
    temporal = math.prod(int(f) for f in vae_config.get("temporal_downsample_factors", (1, 2, 2, 1, 1, 1)))
    clip = int(vae_config.get("clip_length", 17))
    patch = tuple(int(p) for p in (denoiser_config or {}).get("patch_size", (1, 2, 2)))
    return MiniMaxGeometry(
        spatial=spatial,
        frames_per_chunk=clip,
        latents_per_chunk=math.ceil(clip / temporal),  # AutoencoderKLMiniMaxH3's tokens_chunk_size
        latent_channels=int(vae_config.get("latent_channels", 24)),
        audio_channels=int(audio_config.get("latent_channels", 32)),
        patch=(patch[0], patch[1], patch[2]),
    )


# Copied from diffusers.modular_pipelines.minimax_h3.modular_pipeline.align_num_frames
def align_num_frames(num_frames: int, frames_per_chunk: int, latents_per_chunk: int) -> int:
    r"""
    Snap a frame count up to the next `frames_per_chunk * n + latents_per_chunk` the video VAE can encode.

    Args:
        num_frames (`int`): The requested number of frames.
        frames_per_chunk (`int`): Pixel frames the video VAE encodes per chunk, its `clip_length`.
        latents_per_chunk (`int`): Latent frames a chunk keeps, the VAE's `tokens_chunk_size`.

    Returns:
        `int`: The aligned number of frames.
    """
    if num_frames < 1:
        raise ValueError(f"`num_frames` must be positive, got {num_frames}.")
    while num_frames % frames_per_chunk != latents_per_chunk:
        num_frames += 1
    return num_frames


# Copied from diffusers.modular_pipelines.minimax_h3.modular_pipeline.video_latent_num_frames
def video_latent_num_frames(num_frames: int, frames_per_chunk: int, latents_per_chunk: int) -> int:
    r"""
    The number of latent frames the video VAE produces for a `17 * n + 5` frame count.

    Args:
        num_frames (`int`): An aligned number of frames.

    Returns:
        `int`: The number of latent frames, `5 * n + 2`.
    """
    if num_frames % frames_per_chunk != latents_per_chunk:
        raise ValueError(
            f"`num_frames` must be of the form {frames_per_chunk} * n + {latents_per_chunk}, got {num_frames}."
        )
    return (num_frames - latents_per_chunk) // frames_per_chunk * latents_per_chunk + 2


# Copied from diffusers.modular_pipelines.minimax_h3.modular_pipeline.audio_latent_num_frames
def audio_latent_num_frames(
    num_frames: int,
    fps: float = MINIMAX_H3_FPS,
    latents_per_second: int = MINIMAX_H3_AUDIO_LATENTS_PER_SECOND,
) -> int:
    r"""
    The number of audio latents that covers a video of `num_frames` frames.

    Args:
        num_frames (`int`): The number of video frames.
        fps (`float`, defaults to 24): The rate those frames run at, i.e. `components.fps`.
        latents_per_second (`int`, defaults to 40): The audio VAE's latent rate.

    Returns:
        `int`: The number of audio latents, rounded at the latent grid.
    """
    return int(round(num_frames / fps * latents_per_second))


# Copied from diffusers.modular_pipelines.minimax_h3.before_denoise.patchify_video_latents
def patchify_video_latents(latents: torch.Tensor, patch_size: tuple[int, int, int]) -> torch.Tensor:
    r"""
    Pack video latents into transformer rows.

    Args:
        latents (`torch.Tensor` of shape `(batch_size, channels, num_frames, height, width)`):
            The latents to pack.
        patch_size (`tuple[int, int, int]`): The `(t, h, w)` patch.

    Returns:
        `torch.Tensor` of shape `(batch_size * num_patches, channels * prod(patch_size))`: The packed rows, ordered
        frame-major then row-major.
    """
    patch_t, patch_h, patch_w = patch_size
    batch_size, channels, num_frames, height, width = latents.shape
    if num_frames % patch_t or height % patch_h or width % patch_w:
        raise ValueError(
            f"Latents of shape {tuple(latents.shape)} are not divisible by the patch {patch_size}."
        )

    latents = latents.reshape(
        batch_size,
        channels,
        num_frames // patch_t,
        patch_t,
        height // patch_h,
        patch_h,
        width // patch_w,
        patch_w,
    )
    latents = latents.permute(0, 2, 4, 6, 1, 3, 5, 7)
    return latents.reshape(-1, channels * patch_t * patch_h * patch_w).contiguous()


# Copied from diffusers.modular_pipelines.minimax_h3.before_denoise._spatial_position_grid
def _spatial_position_grid(dim: int, patch: int, sqrt_area: float) -> torch.Tensor:
    r"""
    One aspect-normalized spatial rotary axis: `dim // patch` coordinates centred on the unit interval, scaled up by
    32. The right endpoint is excluded, so a square canvas spans `[0, 32)`.
    """
    ratio = dim / sqrt_area
    left = (1.0 - ratio) / 2.0
    # Built with numpy: `np.linspace(..., endpoint=False)` is `start + arange(num) * (stop - start) / num`, which is
    # not what `torch.linspace` computes, and the float64 grid has to be reproduced exactly.
    grid = np.linspace(left, left + ratio, dim // patch, endpoint=False) * _ROPE_SPATIAL_SCALE
    return torch.from_numpy(grid).to(torch.float64)


# Copied from diffusers.modular_pipelines.minimax_h3.before_denoise._temporal_position_grid
def _temporal_position_grid(num_latent_frames: int, origin: float) -> torch.Tensor:
    r"""The rotary time of every latent frame, starting at `origin`. Spacing is non-uniform: `5/3 * (1, 4, 4, 4, 4)`."""
    spans = torch.tensor(
        [
            _ROPE_FRAME_RESCALE * _ROPE_FRAMES_PER_LATENT[index % len(_ROPE_FRAMES_PER_LATENT)]
            for index in range(num_latent_frames)
        ],
        dtype=torch.float64,
    )
    return origin + torch.cat([torch.zeros(1, dtype=torch.float64), spans[:-1].cumsum(0)])


# Copied from diffusers.modular_pipelines.minimax_h3.before_denoise._frame_position_grid
def _frame_position_grid(
    latent_height: int, latent_width: int, patch_h: int, patch_w: int
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The `(h, w)` rotary coordinates of one latent frame, and the width axis they were built from."""
    sqrt_area = np.sqrt(latent_height * latent_width)
    height_grid = _spatial_position_grid(latent_height, patch_h, sqrt_area)
    width_grid = _spatial_position_grid(latent_width, patch_w, sqrt_area)
    grids = torch.meshgrid(height_grid, width_grid, indexing="ij")
    return torch.stack([grid.reshape(-1) for grid in grids], dim=-1), width_grid


@dataclass(frozen=True)
class PackedLayout:
    """The transformer's description of the packed sequence, and how many leading video rows are anchors."""

    position_ids: torch.Tensor  # (S, 3) float64
    token_tags: torch.Tensor  # (S,)
    video_indices: torch.Tensor  # condition rows first
    audio_indices: torch.Tensor
    text_indices: torch.Tensor
    condition_rows: int

    def fields(self, device: torch.device | str) -> dict[str, torch.Tensor]:
        """The layout as the transformer's keyword arguments (float64 positions: CPU and CUDA have it)."""
        return {
            "position_ids": self.position_ids.to(device),
            "token_tags": self.token_tags.to(device),
            "video_indices": self.video_indices.to(device),
            "audio_indices": self.audio_indices.to(device),
            "text_indices": self.text_indices.to(device),
        }


def build_packed_sequence(
    text_token_tags: torch.Tensor,
    num_latent_frames: int,
    latent_height: int,
    latent_width: int,
    num_audio_latents: int,
    patch_size: tuple[int, int, int],
    keyframe_anchors: tuple[str, ...] = (),
) -> PackedLayout:
    """Adapted from diffusers' `MiniMaxH3PrepareLayoutStep.build_packed_sequence` (the same arithmetic, in the
    same order: the float64 grid must be reproduced exactly)."""
    _, patch_h, patch_w = patch_size
    audio_channels = MINIMAX_H3_AUDIO_CHANNELS
    rows_per_frame = (latent_height // patch_h) * (latent_width // patch_w)
    num_text_tokens = text_token_tags.shape[0]
    num_condition_rows = len(keyframe_anchors) * rows_per_frame
    num_audio_rows = num_audio_latents * audio_channels
    num_video_rows = num_latent_frames * rows_per_frame
    sequence_length = num_text_tokens + num_condition_rows + num_audio_rows + num_video_rows
    condition_start = num_text_tokens
    audio_start = condition_start + num_condition_rows
    video_start = audio_start + num_audio_rows

    # 1. The (t, h, w) grid: text on the time axis at its row index, the media clock continuing from there
    position_ids = torch.zeros(sequence_length, 3, dtype=torch.float64)
    position_ids[:num_text_tokens, 0] = torch.arange(num_text_tokens, dtype=torch.float64)
    frame_grid, width_grid = _frame_position_grid(latent_height, latent_width, patch_h, patch_w)
    for index, anchor in enumerate(keyframe_anchors):
        if anchor == "first":
            anchor_time = float(num_text_tokens)
        elif anchor == "last":  # numpy's pairwise sum, as the reference computes this anchor
            spans = np.ones(num_latent_frames, dtype=np.float64) * _ROPE_FRAME_RESCALE
            for offset in range(len(_ROPE_FRAMES_PER_LATENT)):
                spans[offset :: len(_ROPE_FRAMES_PER_LATENT)] *= _ROPE_FRAMES_PER_LATENT[offset]
            anchor_time = float(num_text_tokens) + float(spans.sum()) - _ROPE_FRAME_RESCALE
        else:
            raise ValueError(f"a keyframe anchor is 'first' or 'last', got {anchor!r}")
        rows = slice(condition_start + index * rows_per_frame, condition_start + (index + 1) * rows_per_frame)
        position_ids[rows, 0] = anchor_time
        position_ids[rows, 1:] = frame_grid
    # Audio rows: channel-major, on the video's clock, pinned to the two ends of the width grid
    audio_time = float(num_text_tokens) + torch.arange(num_audio_latents, dtype=torch.float64)
    position_ids[audio_start:video_start, 0] = audio_time.repeat(audio_channels)
    position_ids[audio_start:video_start, 2] = torch.cat(
        [
            torch.full((num_audio_latents,), float(width_grid[0]), dtype=torch.float64),
            torch.full((num_audio_rows - num_audio_latents,), float(width_grid[-1]), dtype=torch.float64),
        ]
    )
    video_position_ids = torch.empty(num_latent_frames, rows_per_frame, 3, dtype=torch.float64)
    video_position_ids[:, :, 0] = _temporal_position_grid(num_latent_frames, float(num_text_tokens))[:, None]
    video_position_ids[:, :, 1:] = frame_grid[None]
    position_ids[video_start:] = video_position_ids.reshape(-1, 3)

    # 2. Row indices and modality tags
    return packed_layout(
        position_ids, text_token_tags, condition_start, audio_start, video_start, num_condition_rows
    )


def packed_layout(
    position_ids: torch.Tensor,
    text_token_tags: torch.Tensor,
    condition_start: int,
    audio_start: int,
    video_start: int,
    condition_rows: int,
) -> PackedLayout:
    """The row indices and modality tags of a sequence laid out as text, condition (or reference) video rows,
    audio rows, then the target video rows; the condition rows come first among the video rows."""
    sequence_length, num_text_tokens = position_ids.shape[0], text_token_tags.shape[0]
    video_indices = torch.cat(
        [torch.arange(condition_start, audio_start), torch.arange(video_start, sequence_length)]
    )
    audio_indices = torch.arange(audio_start, video_start)
    text_indices = torch.arange(num_text_tokens)
    token_tags = torch.empty(sequence_length, dtype=torch.long)
    token_tags[text_indices] = text_token_tags.to(torch.long)
    token_tags[audio_indices] = AUDIO_TAG
    token_tags[video_indices] = VIDEO_TAG
    return PackedLayout(position_ids, token_tags, video_indices, audio_indices, text_indices, condition_rows)


def row_timesteps(
    layout: PackedLayout, video_timestep: float, audio_timestep: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adapted from `MiniMaxH3SetTimestepsStep.build_row_timesteps` (no audio references here): every row's
    timestep (anchors held at max(t, 0.999), text at the video's), reduced to (distinct, index per row)."""
    length = int(layout.video_indices.numel() + layout.audio_indices.numel() + layout.text_indices.numel())
    rows = torch.full((length,), video_timestep, dtype=torch.float32)
    rows[layout.video_indices[: layout.condition_rows]] = max(video_timestep, KEYFRAME_NOISE_AUG)
    rows[layout.audio_indices] = audio_timestep
    return torch.unique(rows, sorted=True, return_inverse=True)


def unpatchify_video_rows(
    rows: torch.Tensor, channels: int, frames: int, height: int, width: int, patch: tuple[int, int, int]
) -> torch.Tensor:
    """(F x h x w patches, C x patch) rows -> (1, C, F, H, W) latents: `MiniMaxH3AfterDenoiseStep`'s inverse."""
    pt, ph, pw = patch
    rows = rows.reshape(-1, frames // pt, height // ph, width // pw, channels, pt, ph, pw)
    rows = rows.permute(0, 4, 1, 5, 2, 6, 3, 7)
    return rows.reshape(-1, channels, frames, height, width).contiguous()
