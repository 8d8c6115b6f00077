"""The VIDEO value that travels on a VIDEO wire, and the AUDIO value inside it.

Lives here: `Video`, `Audio`, `video_problem`, `audio_problem`, `MAX_FPS`. Imports stdlib, torch.
The layout, fixed so that a model family's VAE decode can produce it directly:

- `Video.frames`: a float32 CPU tensor (T, H, W, 3), values in [0, 1], frame 0 first: the same layout as an
  IMAGE batch (B = T), so Video to Frames hands it to any image node and Create Video takes an IMAGE batch.
  A decoder that yields (B, C, T, H, W) in [-1, 1] (Wan, LTX) converts with
  `((x[0].permute(1, 2, 3, 0) + 1) / 2).clamp(0, 1).float().cpu()`.
- `Video.fps`: a finite float > 0 (frames per second; 24000/1001 is 23.976...). Writers turn it into a
  rational rate (`rate()`), so 23.976 and 29.97 survive a save and load.
- `Video.audio`: None or an `Audio`: `waveform` a float32 CPU tensor (C, N), C channels (1 or 2) of N samples
  in [-1, 1], and `sample_rate` an int in Hz. Its duration need not equal the frames' (writers keep both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

MAX_FPS = 1000.0  # beyond any real video; also keeps a webp frame duration (whole ms) at least 1 ms
_RATE_DENOMINATOR = 1001 * 1000  # 24000/1001 and 30000/1001 come back exactly from their float


@dataclass(frozen=True)
class Audio:
    """A sound track: `waveform` (C, N) float32 in [-1, 1] at `sample_rate` Hz."""

    waveform: torch.Tensor
    sample_rate: int

    @property
    def seconds(self) -> float:
        return self.waveform.shape[-1] / self.sample_rate


@dataclass(frozen=True)
class Video:
    """Frames (T, H, W, 3) float32 in [0, 1], shown at `fps` frames per second, with an optional sound track."""

    frames: torch.Tensor
    fps: float
    audio: Audio | None = None

    @property
    def count(self) -> int:
        return int(self.frames.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return int(self.frames.shape[2]), int(self.frames.shape[1])

    @property
    def seconds(self) -> float:
        return self.count / self.fps

    def rate(self) -> Fraction:
        """`fps` as the rational frame rate a container stores."""
        return Fraction(self.fps).limit_denominator(_RATE_DENOMINATOR)


def fps_problem(fps: object) -> str | None:
    """Why `fps` is no frame rate, or None."""
    if isinstance(fps, bool) or not isinstance(fps, int | float):
        return f"fps must be a number, got {type(fps).__name__}"
    if not math.isfinite(fps) or fps <= 0:
        return f"fps must be above 0, got {fps:g}"
    if fps > MAX_FPS:
        return f"fps {fps:g} is above {MAX_FPS:g}"
    return None


def frames_problem(frames: object) -> str | None:
    """Why `frames` is not a (T, H, W, 3) float tensor of at least one frame, or None."""
    if not isinstance(frames, torch.Tensor):
        return f"frames must be an image tensor, got {type(frames).__name__}"
    if frames.ndim != 4 or frames.shape[-1] != 3:
        return f"frames must be (frames, height, width, 3), got shape {tuple(frames.shape)}"
    if frames.shape[0] == 0:
        return "there are no frames (0 images)"
    if frames.shape[1] == 0 or frames.shape[2] == 0:
        return f"frames of size {frames.shape[2]}x{frames.shape[1]} have no pixels"
    if not frames.is_floating_point():
        return f"frames must be floats in [0, 1], got {frames.dtype}"
    return None


def audio_problem(audio: object) -> str | None:
    """Why `audio` is no `Audio` a container can hold, or None."""
    if not isinstance(audio, Audio):
        return f"audio must be an AUDIO value, got {type(audio).__name__}"
    wave = audio.waveform
    if not isinstance(wave, torch.Tensor) or wave.ndim != 2 or wave.shape[0] not in (1, 2):
        shape = tuple(wave.shape) if isinstance(wave, torch.Tensor) else type(wave).__name__
        return f"audio waveform must be (1 or 2 channels, samples), got {shape}"
    if (
        isinstance(audio.sample_rate, bool)
        or not isinstance(audio.sample_rate, int)
        or audio.sample_rate <= 0
    ):
        return f"audio sample rate must be a whole number of Hz above 0, got {audio.sample_rate!r}"
    return None


def video_problem(video: object) -> str | None:
    """Why `video` is no valid `Video`, or None: what every writer checks first."""
    if not isinstance(video, Video):
        return f"expected a VIDEO value, got {type(video).__name__}"
    problem = frames_problem(video.frames) or fps_problem(video.fps)
    if problem is None and video.audio is not None:
        problem = audio_problem(video.audio)
    return problem
