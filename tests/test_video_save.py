"""Save Video: every format decodes back to the frames, size and rate written, carries the workflow, and
is written whole into the output folder; bad input gets one clear sentence."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from nodes.png import read_embedded_workflow
from nodes.video import CreateVideo, SaveVideo
from nodes.video_write import frames_to_uint8
from nodes.workflow_json import read_workflow_json
from pipelines.video.value import Video
from tests.video_support import Recorder, tiny_video, tone

WORKFLOW = {"format": "nodeloom.workflow", "version": 1, "nodes": {"é": {"type": "Text"}}}


def save(tmp_path: Path, video: Video, fmt: str, prefix: str = "clip") -> tuple[list[Path], Recorder]:
    rec = Recorder(tmp_path, WORKFLOW)
    SaveVideo(video=video, prefix=prefix, format=fmt, crf=19).run(rec.ctx)
    return [Path(p) for p in rec.ctx.files], rec


def decode(path: Path) -> tuple[np.ndarray, Fraction, dict[str, str]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])
        return frames, stream.average_rate, dict(container.metadata)


@pytest.mark.parametrize("fmt", ["mp4", "webm"])
def test_mp4_and_webm_decode_to_the_frames_size_and_rate_written(tmp_path, fmt) -> None:
    video = tiny_video(fps=12.0)  # 9 frames of 48x32
    (path,), _ = save(tmp_path, video, fmt)
    assert path.name == f"clip_00001.{fmt}"
    frames, rate, _ = decode(path)
    assert frames.shape == (9, 32, 48, 3)
    assert rate == 12
    # Lossy codec with 4:2:0 chroma: the gradients (and the red channel's one sharp wrap) come back within
    # ~5 levels on average per frame; a neighbouring frame instead of the right one is ~25 levels off.
    error = np.abs(frames.astype(float) - frames_to_uint8(video.frames).astype(float)).mean(axis=(1, 2, 3))
    assert error.max() < 10, error


def test_ntsc_rate_survives_exactly(tmp_path) -> None:
    (path,), _ = save(tmp_path, tiny_video(fps=24000 / 1001), "webm")
    assert decode(path)[1] == Fraction(24000, 1001)


@pytest.mark.parametrize("fmt", ["mp4", "webm", "webp"])
def test_the_workflow_is_embedded_and_reads_back(tmp_path, fmt) -> None:
    (path,), _ = save(tmp_path, tiny_video(), fmt)
    assert read_workflow_json(path) == WORKFLOW
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left behind


def test_webp_has_every_frame_and_the_rate_in_milliseconds(tmp_path) -> None:
    (path,), rec = save(tmp_path, tiny_video(fps=10.0), "webp")
    with Image.open(path) as image:
        assert image.format == "WEBP" and image.n_frames == 9 and image.size == (48, 32)
        image.seek(1)
        image.load()
        assert image.info["duration"] == 100
    assert rec.logs == []  # 10 fps is exactly 100 ms: nothing to say


def test_png_frames_are_exact_sorted_and_alone(tmp_path) -> None:
    video = tiny_video()
    paths, _ = save(tmp_path, video, "png")
    names = [p.name for p in paths]
    assert names == [f"clip_00001_{i:05d}.png" for i in range(9)]
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # nothing else in the folder
    expected = frames_to_uint8(video.frames)
    for i, path in enumerate(sorted(tmp_path.iterdir())):
        with Image.open(path) as image:
            assert np.array_equal(np.asarray(image), expected[i])  # PNG is lossless: bit-exact
        assert read_embedded_workflow(path) == WORKFLOW
    # A second save takes the next set number and leaves the first set alone.
    again, _ = save(tmp_path, video, "png")
    assert again[0].name == "clip_00002_00000.png" and len(list(tmp_path.iterdir())) == 18


def test_odd_sizes_are_padded_for_h264_and_kept_for_vp9(tmp_path) -> None:
    odd = tiny_video(height=33, width=47)
    (mp4,), rec = save(tmp_path, odd, "mp4")
    assert decode(mp4)[0].shape == (9, 34, 48, 3)
    assert rec.logs == ["padded 47x33 to 48x34: H.264 needs an even width and height"]
    (webm,), rec = save(tmp_path, odd, "webm")
    assert decode(webm)[0].shape == (9, 33, 47, 3) and rec.logs == []


def test_sound_is_written_to_mp4_and_webm_and_said_to_be_dropped_elsewhere(tmp_path) -> None:
    video = tiny_video(fps=12.0, audio=tone(0.75, 16000, channels=2))
    for fmt in ("mp4", "webm"):
        (path,), _ = save(tmp_path, video, fmt)
        with av.open(str(path)) as container:
            (stream,) = container.streams.audio
            assert stream.codec_context.channels == 2
    _, rec = save(tmp_path, video, "webp")
    assert "webp has no sound track: the audio was not saved" in rec.logs


def test_the_first_frame_is_previewed(tmp_path) -> None:
    _, rec = save(tmp_path, tiny_video(), "mp4")
    (preview,) = [e for e in rec.events if type(e).__name__ == "NodePreview"]
    assert preview.image.size == (48, 32)


def test_zero_frames_are_refused_clearly(tmp_path) -> None:
    rec = Recorder(tmp_path)
    with pytest.raises(ValueError, match=r"^input 'frames': there are no frames \(0 images\)$"):
        CreateVideo(frames=torch.zeros(0, 32, 48, 3), fps=12.0).run(rec.ctx)
    with pytest.raises(ValueError, match=r"^input 'video': there are no frames"):
        SaveVideo(video=Video(torch.zeros(0, 32, 48, 3), 12.0), prefix="x", format="mp4", crf=19).run(rec.ctx)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fps", [0.0, -3.0, float("nan")])
def test_fps_at_or_below_zero_is_refused(tmp_path, fps) -> None:
    with pytest.raises(ValueError, match="^field 'fps': fps must be above 0"):
        CreateVideo(frames=torch.zeros(2, 8, 8, 3), fps=fps).run(Recorder(tmp_path).ctx)


def test_create_video_keeps_frames_rate_and_sound(tmp_path) -> None:
    frames = torch.rand(5, 8, 10, 3)
    sound = tone(0.5, 8000)
    video = CreateVideo(frames=frames, audio=sound, fps=7.5).run(Recorder(tmp_path).ctx)["video"]
    assert torch.equal(video.frames, frames) and video.fps == 7.5 and video.audio is sound
    assert video.count == 5 and video.size == (10, 8)


def test_the_prefix_cannot_leave_the_output_folder(tmp_path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="field 'prefix'"):
        save(out, tiny_video(), "png", prefix="../escape")
    with pytest.raises(ValueError, match="field 'prefix'"):
        save(out, tiny_video(), "mp4", prefix="../escape")
    assert not list(tmp_path.glob("escape*"))


def test_workflow_tag_is_json_text(tmp_path) -> None:
    (path,), _ = save(tmp_path, tiny_video(), "mp4")
    tags = decode(path)[2]
    assert json.loads(tags["nodeloom.workflow"]) == WORKFLOW
