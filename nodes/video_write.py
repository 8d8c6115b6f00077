"""Writing a VIDEO value to files: mp4 (H.264) and webm (VP9) through PyAV, animated webp through Pillow,
and a numbered set of lossless PNGs, each carrying the workflow that made it.

Lives here: `write_video_file`, `write_png_frames`, `frames_to_uint8`, `VIDEO_FORMATS`. Imports numpy, PIL,
`nodes.files`, `nodes.png` (torch), `nodes.video_read` (the tag names), `pipelines.video.value`; av inside the
writer.

Where the workflow goes (the names live in `nodes.video_read`, which finds it again): mp4 and webm carry it as the container tag
`nodeloom.workflow` (mp4 with `movflags=use_metadata_tags`; Matroska upper-cases tag names), animated webp as
EXIF ImageDescription (0x010E) text `nodeloom.workflow:` + ASCII JSON (Pillow writes and reads EXIF in webp;
EXIF text is ASCII, hence `ensure_ascii`), and every PNG frame as SaveImage's iTXt chunk.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from nodes.files import check_prefix, clean_stale_temp_files, fsync_dir, glob_escape, temp_path_for
from nodes.png import save_png_with_workflow
from nodes.video_read import EXIF_IMAGE_DESCRIPTION, WEBP_WORKFLOW_PREFIX, WORKFLOW_TAG
from pipelines.video.value import Video

if TYPE_CHECKING:
    import torch

VIDEO_FORMATS = ("mp4", "webm", "webp", "png")
# (codec, audio codec, audio rates the codec takes: the first is used when the track's rate is not one)
_CODECS = {
    "mp4": ("libx264", "aac", ()),
    "webm": ("libvpx-vp9", "libopus", (48000, 24000, 16000, 12000, 8000)),
}
FRAME_DIGITS = 5  # png frames: <prefix>_<n:05>_<frame:05>.png, more digits only past 99,999 frames


def frames_to_uint8(frames: torch.Tensor) -> np.ndarray:
    """(T, H, W, 3) floats in [0, 1] -> uint8 RGB, rounded as SaveImage rounds."""
    return (frames.detach().float().clamp(0, 1).cpu().numpy() * 255.0).round().astype(np.uint8)


def _even(frames: np.ndarray) -> np.ndarray:
    """Pad to even width and height by repeating the last column/row: H.264 in yuv420p needs both even."""
    h, w = frames.shape[1:3]
    return np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), mode="edge")


def write_video_file(
    video: Video, path: Path, fmt: str, workflow: dict[str, Any] | None, crf: int
) -> list[str]:
    """Encode `video` into the file `path` (a temporary name: the format is given, not guessed from it).

    Returns notes for the node's log (padding added, audio dropped)."""
    pixels = frames_to_uint8(video.frames)
    if fmt == "webp":
        return _write_webp(video, pixels, path, workflow, crf)
    return _write_av(video, pixels, path, fmt, workflow, crf)


def _write_av(
    video: Video, pixels: np.ndarray, path: Path, fmt: str, workflow: dict[str, Any] | None, crf: int
) -> list[str]:
    import av

    notes: list[str] = []
    codec, audio_codec, audio_rates = _CODECS[fmt]
    if fmt == "mp4" and (pixels.shape[1] % 2 or pixels.shape[2] % 2):
        w, h = video.size
        pixels = _even(pixels)
        notes.append(
            f"padded {w}x{h} to {pixels.shape[2]}x{pixels.shape[1]}: H.264 needs an even width and height"
        )
    options = {"movflags": "use_metadata_tags"} if fmt == "mp4" else {}
    with av.open(str(path), "w", format=fmt, options=options) as container:
        if workflow is not None:
            container.metadata[WORKFLOW_TAG] = json.dumps(workflow, ensure_ascii=False)
        stream = container.add_stream(codec, rate=video.rate())
        stream.width, stream.height = pixels.shape[2], pixels.shape[1]
        stream.pix_fmt = "yuv420p"
        # VP9 needs a zero bitrate for crf alone to decide the quality (constant quality mode).
        stream.options = {"crf": str(crf)} if fmt == "mp4" else {"crf": str(crf), "b": "0"}
        audio_stream = None
        if video.audio is not None:
            rate = video.audio.sample_rate
            rate = rate if not audio_rates or rate in audio_rates else audio_rates[0]
            layout = "mono" if video.audio.waveform.shape[0] == 1 else "stereo"
            audio_stream = container.add_stream(audio_codec, rate=rate, layout=layout)
        for picture in pixels:
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
        if audio_stream is not None and video.audio is not None:
            _encode_audio(av, container, audio_stream, video)
    return notes


def _encode_audio(av: Any, container: Any, stream: Any, video: Video) -> None:
    """The whole track through a resampler to the encoder's sample format, rate and frame size."""
    assert video.audio is not None
    wave = video.audio.waveform.detach().float().clamp(-1, 1).cpu().numpy()  # (C, N)
    layout = "mono" if wave.shape[0] == 1 else "stereo"
    source = av.AudioFrame.from_ndarray(np.ascontiguousarray(wave), format="fltp", layout=layout)
    source.sample_rate = video.audio.sample_rate
    target = stream.codec_context
    resampler = av.AudioResampler(
        format=target.format.name,
        layout=layout,
        rate=target.sample_rate,
        frame_size=target.frame_size or None,
    )
    done = 0
    dated = stream.codec_context.name == "aac"
    for frame in [*resampler.resample(source), *resampler.resample(None)]:
        if dated:
            # Timestamps from 0: the encoder then dates its 1024 priming samples before 0 and the mp4 muxer
            # writes the edit list that makes decoders skip them (undated, the sound lags by 1024 samples).
            # Opus is left undated: webm records its delay in the header, and dating it there lost the
            # last 20 ms frame on reading back (measured with PyAV 18.1).
            frame.pts, done = done, done + frame.samples
        container.mux(stream.encode(frame))
    container.mux(stream.encode())


def _write_webp(
    video: Video, pixels: np.ndarray, path: Path, workflow: dict[str, Any] | None, crf: int
) -> list[str]:
    pictures = [Image.fromarray(p) for p in pixels]
    exif = Image.Exif()
    if workflow is not None:
        exif[EXIF_IMAGE_DESCRIPTION] = WEBP_WORKFLOW_PREFIX + json.dumps(workflow, ensure_ascii=True)
    # WebP frame durations are whole milliseconds, so fps comes back as 1000 / round(1000 / fps).
    duration = max(1, round(1000 / video.fps))
    pictures[0].save(
        path,
        format="WEBP",
        save_all=True,
        append_images=pictures[1:],
        duration=duration,
        loop=0,
        lossless=crf == 0,
        quality=max(1, 100 - 2 * crf),
        exif=exif,
    )
    notes = [] if video.audio is None else ["webp has no sound track: the audio was not saved"]
    if abs(1000 / duration - video.fps) > 0.01:
        notes.append(
            f"webp stores frame times in whole milliseconds: {video.fps:g} fps is saved as {1000 / duration:g}"
        )
    return notes


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_temp(folder: Path, name: str, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` into a new temporary file in `folder`, fsynced; deleted again if the write fails."""
    tmp = temp_path_for(folder / name)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _umask_mode()))
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _link_new(tmp: Path, path: Path) -> bool:
    """Give `tmp` the name `path` only if no file has it (False when taken)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links here (some network/FUSE file systems): reserve the name, then replace it
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        os.replace(tmp, path)
    return True


def write_png_frames(folder: Path, prefix: str, video: Video, workflow: dict[str, Any] | None) -> list[Path]:
    """One lossless PNG per frame, `<prefix>_<n>_<frame>.png` with `n` the first set number not taken.

    Every frame is written under a temporary name first; the names appear only once all are complete, and the
    set's number is claimed by its frame 0 (created exclusively, so two runs at once never mix frames)."""
    check_prefix(prefix)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    clean_stale_temp_files(folder)
    digits = max(FRAME_DIGITS, len(str(video.count - 1)))
    temps: list[Path] = []
    try:
        for picture in frames_to_uint8(video.frames):
            image = Image.fromarray(picture)
            temps.append(
                _write_temp(
                    folder, f"{prefix}.png", lambda tmp, i=image: save_png_with_workflow(i, tmp, workflow)
                )
            )
        pattern = re.compile(rf"{re.escape(prefix)}_(\d+)_\d+\.png")
        taken = [pattern.fullmatch(p.name) for p in folder.glob(f"{glob_escape(prefix)}_*_*.png")]
        n = max((int(m.group(1)) for m in taken if m), default=0) + 1
        while True:
            names = [folder / f"{prefix}_{n:05d}_{i:0{digits}d}.png" for i in range(len(temps))]
            if _link_new(temps[0], names[0]):
                break
            n += 1
        for done, (tmp, name) in enumerate(zip(temps[1:], names[1:], strict=True), start=1):
            if not _link_new(tmp, name):
                for ours in names[:done]:  # never leave part of a set behind
                    ours.unlink(missing_ok=True)
                raise FileExistsError(f"{name} appeared while saving the frames of set {n}")
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    fsync_dir(folder)
    return names
