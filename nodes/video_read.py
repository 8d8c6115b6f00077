"""Reading video files: frames, fps and sound into a VIDEO value, and the workflow a saved video carries.

Lives here: `load_video`, `read_frames`, `read_video_workflow_text`, `video_container`, `VideoFileError`, the workflow tag
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
    if not kept:
        raise VideoFileError(f"no frames from start_frame {start}")
    return kept


def _frames_tensor(kept: list[np.ndarray]) -> Any:
    import torch

    return torch.from_numpy(np.stack(kept).astype(np.float32) / 255.0)  # (T, H, W, 3)


def _fit(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) scaled down so neither passes `max_side` (0: unchanged), at least 1 pixel each."""
    if not max_side or max(width, height) <= max_side:
        return width, height
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _webp_frames(path: Path, start: int, limit: int, max_side: int) -> tuple[list[np.ndarray], float]:
    try:
        with Image.open(path, formats=["WEBP"]) as image:
            durations: list[float] = []

            def pictures() -> Any:
                for i in range(getattr(image, "n_frames", 1)):
                    image.seek(i)
                    rgb = image.convert("RGB")  # loading the frame sets its duration
                    durations.append(float(image.info.get("duration") or 0))
                    size = _fit(*rgb.size, max_side)
                    yield np.asarray(rgb if size == rgb.size else rgb.resize(size, Image.Resampling.BILINEAR))

            kept = _collect(pictures(), start, limit)
    except (UnidentifiedImageError, OSError, SyntaxError, EOFError) as exc:
        raise VideoFileError(f"damaged webp: {str(exc)[:200]}") from None
    shown = [d for d in durations if d > 0]
    return kept, 1000.0 / (sum(shown) / len(shown)) if shown else 24.0  # a still webp has no duration


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


def _av_frames(
    av: Any, container: Any, start: int, limit: int, max_side: int
) -> tuple[list[np.ndarray], float]:
    if not container.streams.video:
        raise VideoFileError("the file has no video stream")
    stream = container.streams.video[0]
    rate = stream.average_rate or stream.guessed_rate
    fps = float(rate) if rate else 24.0

    def pictures() -> Any:
        for frame in container.decode(stream):
            width, height = _fit(frame.width, frame.height, max_side)
            yield frame.to_ndarray(format="rgb24", width=width, height=height)

    return _collect(pictures(), start, limit), fps


def _is_webp(path: Path) -> bool:
    with path.open("rb") as f:
        return video_container(f.read(16)) == "webp"


def read_frames(
    path: Path, start: int = 0, limit: int = 0, max_side: int = 0
) -> tuple[list[np.ndarray], float]:
    """uint8 (H, W, 3) frames `start`.. (at most `limit`, 0: all), scaled down to at most `max_side` pixels
    (0: as stored), and the fps: what the editor's player shows, without the sound or a float copy."""
    path = Path(path)
    if _is_webp(path):
        return _webp_frames(path, start, limit, max_side)
    import av

    try:
        with av.open(str(path), metadata_errors="replace") as container:
            return _av_frames(av, container, start, limit, max_side)
    except av.FFmpegError as exc:
        raise VideoFileError(f"not a readable video: {str(exc)[:200]}") from None


def load_video(path: Path, start: int = 0, limit: int = 0) -> Video:
    """Frames `start`.. (at most `limit`, 0: all) of the file, its fps and the matching span of its sound."""
    from pipelines.video.value import Video

    path = Path(path)
    if _is_webp(path):
        kept, fps = _webp_frames(path, start, limit, 0)
        return Video(_frames_tensor(kept), fps)
    import av

    try:
        with av.open(str(path), metadata_errors="replace") as container:
            kept, fps = _av_frames(av, container, start, limit, 0)
            # Cut the sound to the frames loaded; all of it when the frames ran to the file's end.
            end_s = (start + len(kept)) / fps if limit and len(kept) == limit else None
            audio = _decoded_audio(av, container, start / fps, end_s)
    except av.FFmpegError as exc:
        raise VideoFileError(f"not a readable video: {str(exc)[:200]}") from None
    return Video(_frames_tensor(kept), fps, audio)
