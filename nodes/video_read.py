"""Reading video files: frames, fps and sound into a VIDEO value, and the workflow a saved video carries.

Lives here: `load_video`, `read_video_workflow_text`, `video_container`, `VideoFileError`, the workflow tag
names, `MAX_LOAD_BYTES`, `MAX_WORKFLOW_CHARS`. Imports numpy, PIL; av, torch and `pipelines.video.value` inside
the functions, so `nodes.workflow_json` (which asks `video_container` about every file it opens) stays light.

Bounds, since a video comes from anywhere: frames are decoded one at a time and refused once they would pass
`MAX_LOAD_BYTES` as float32 (set Load Video's frame_limit); a workflow tag longer than `MAX_WORKFLOW_CHARS` is
refused before it is parsed (the container library has read it by then: it is at most the file's size).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, UnidentifiedImageError

if TYPE_CHECKING:
    from pipelines.video.value import Audio, Video

WORKFLOW_TAG = "nodeloom.workflow"  # mp4/webm container tag (Matroska upper-cases it)
WEBP_WORKFLOW_PREFIX = "nodeloom.workflow:"  # webp: EXIF ImageDescription text
EXIF_IMAGE_DESCRIPTION = 0x010E

MAX_LOAD_BYTES = 8 * 2**30  # ~340 frames of 1080p as float32; a longer clip needs frame_limit
MAX_WORKFLOW_CHARS = (
    32 * 2**20
)  # nodes.workflow_json.MAX_FILE_BYTES: a workflow .json file's cap (not imported: it imports us)
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".webp", ".gif")


class VideoFileError(ValueError):
    """A video file that cannot be read; the message says why (without the file name)."""


def video_container(raw: bytes) -> str | None:
    """ "mp4", "webm" (Matroska) or "webp" from a file's first bytes, else None."""
    if raw[4:8] == b"ftyp":
        return "mp4"
    if raw.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    if raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        return "webp"
    return None


def _bounded(text: str | None) -> str | None:
    if text is not None and len(text) > MAX_WORKFLOW_CHARS:
        raise VideoFileError(
            f"the embedded workflow is {len(text):,} characters; at most {MAX_WORKFLOW_CHARS:,} are read "
            "(a real workflow is far smaller)"
        )
    return text


def read_video_workflow_text(path: Path, kind: str) -> str | None:
    """The workflow text a saved mp4/webm/webp carries, None when it has none; `VideoFileError` when the
    file cannot be read as its `kind` (from `video_container`)."""
    if kind == "webp":
        try:
            with Image.open(path, formats=["WEBP"]) as image:
                text = image.getexif().get(EXIF_IMAGE_DESCRIPTION)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as exc:
            raise VideoFileError(f"damaged webp: {str(exc)[:200]}") from None
        if not isinstance(text, str) or not text.startswith(WEBP_WORKFLOW_PREFIX):
            return None
        return _bounded(text.removeprefix(WEBP_WORKFLOW_PREFIX))
    import av

    try:
        with av.open(str(path), metadata_errors="replace") as container:
            tags = dict(container.metadata)
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise VideoFileError(f"not a readable {kind} video: {str(exc)[:200]}") from None
    # Matroska stores tag names upper-case.
    text = next((v for k, v in tags.items() if k.lower() == WORKFLOW_TAG), None)
    return _bounded(text)


def _too_big(count: int, shape: tuple[int, ...]) -> VideoFileError:
    h, w = shape[:2]
    return VideoFileError(
        f"{count:,} frames of {w}x{h} would need more than {MAX_LOAD_BYTES / 2**30:g} GiB as float32; "
        "set frame_limit (and start_frame) to load part of it"
    )


def _collect(pictures: Any, start: int, limit: int) -> list[np.ndarray]:
    """uint8 (H, W, 3) pictures from index `start`, at most `limit` (0: all), within `MAX_LOAD_BYTES`."""
    kept: list[np.ndarray] = []
    for i, picture in enumerate(pictures):
        if i < start:
            continue
        if limit and len(kept) >= limit:
            break
        if (len(kept) + 1) * picture.size * 4 > MAX_LOAD_BYTES:
            raise _too_big(len(kept) + 1, picture.shape)
        kept.append(picture)
    return kept


def _frames_tensor(kept: list[np.ndarray]) -> Any:
    import torch

    return torch.from_numpy(np.stack(kept).astype(np.float32) / 255.0)  # (T, H, W, 3)


def _load_webp(path: Path, start: int, limit: int) -> Video:
    try:
        with Image.open(path, formats=["WEBP"]) as image:
            durations: list[float] = []

            def pictures() -> Any:
                for i in range(getattr(image, "n_frames", 1)):
                    image.seek(i)
                    rgb = np.asarray(image.convert("RGB"))  # loading the frame sets its duration
                    durations.append(float(image.info.get("duration") or 0))
                    yield rgb

            kept = _collect(pictures(), start, limit)
    except (UnidentifiedImageError, OSError, SyntaxError, EOFError) as exc:
        raise VideoFileError(f"damaged webp: {str(exc)[:200]}") from None
    if not kept:
        raise VideoFileError(f"no frames from start_frame {start} (the file has {len(durations)})")
    shown = [d for d in durations if d > 0]
    fps = 1000.0 / (sum(shown) / len(shown)) if shown else 24.0  # a still webp has no duration
    from pipelines.video.value import Video

    return Video(_frames_tensor(kept), fps)


def _decoded_audio(av: Any, container: Any, start_s: float, end_s: float | None) -> Audio | None:
    """The first sound track, as float32 (C <= 2, N), from `start_s` to `end_s` (None: its end)."""
    if not container.streams.audio:
        return None
    stream = container.streams.audio[0]
    layout = "mono" if stream.codec_context.channels == 1 else "stereo"
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=stream.codec_context.sample_rate)
    container.seek(0)
    chunks = [f.to_ndarray() for frame in container.decode(stream) for f in resampler.resample(frame)]
    chunks += [f.to_ndarray() for f in resampler.resample(None)]
    if not chunks:
        return None
    import torch

    from pipelines.video.value import Audio

    rate = int(stream.codec_context.sample_rate)
    end = None if end_s is None else round(end_s * rate)
    wave = np.concatenate(chunks, axis=1)[:, round(start_s * rate) : end]
    return Audio(torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32)), rate)


def load_video(path: Path, start: int = 0, limit: int = 0) -> Video:
    """Frames `start`.. (at most `limit`, 0: all) of the file, its fps and the matching span of its sound."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(16)
    if video_container(head) == "webp":
        return _load_webp(path, start, limit)
    import av

    try:
        with av.open(str(path), metadata_errors="replace") as container:
            if not container.streams.video:
                raise VideoFileError("the file has no video stream")
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            fps = float(rate) if rate else 24.0
            pictures = (frame.to_ndarray(format="rgb24") for frame in container.decode(stream))
            kept = _collect(pictures, start, limit)
            if not kept:
                raise VideoFileError(f"no frames from start_frame {start}")
            # Cut the sound to the frames loaded; all of it when the frames ran to the file's end.
            end_s = (start + len(kept)) / fps if limit and len(kept) == limit else None
            audio = _decoded_audio(av, container, start / fps, end_s)
    except av.FFmpegError as exc:
        raise VideoFileError(f"not a readable video: {str(exc)[:200]}") from None
    from pipelines.video.value import Video

    return Video(_frames_tensor(kept), fps, audio)
