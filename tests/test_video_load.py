"""Load Video and Video to Frames: a saved clip comes back with its frames, rate and sound; a saved video
reopens its workflow like a PNG does (`app check`, `app --run`, the editor's drop); bad files get a sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.main import main
from nodes import video_read
from nodes.problems import WorkflowError
from nodes.video import LoadVideo, SaveVideo, VideoToFrames
from nodes.video_write import frames_to_uint8
from nodes.workflow_json import read_workflow_json
from tests.video_support import Recorder, tiny_video, tone

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "resources/workflows/video_demo.json"


def saved(tmp_path: Path, fmt: str, **video: object) -> Path:
    rec = Recorder(tmp_path, {"format": "nodeloom.workflow", "version": 1, "nodes": {}})
    SaveVideo(video=tiny_video(**video), prefix="clip", format=fmt, crf=19).run(rec.ctx)
    return Path(rec.ctx.files[0])


def load(path: Path, start: int = 0, limit: int = 0):
    return LoadVideo(path=str(path), start_frame=start, frame_limit=limit).run(Recorder(path.parent).ctx)[
        "video"
    ]


@pytest.mark.parametrize("fmt", ["mp4", "webm", "webp"])
def test_a_saved_clip_loads_back(tmp_path, fmt) -> None:
    video = load(saved(tmp_path, fmt, fps=10.0))
    assert video.frames.shape == (9, 32, 48, 3) and video.frames.dtype.is_floating_point
    assert 0.0 <= video.frames.min() and video.frames.max() <= 1.0
    assert video.fps == pytest.approx(10.0)  # webp: 100 ms frames are exactly 10 fps


def test_start_frame_and_frame_limit_pick_the_frames(tmp_path) -> None:
    original = frames_to_uint8(tiny_video().frames).astype(float)
    part = load(saved(tmp_path, "webp"), start=3, limit=4)
    assert part.count == 4
    got = np.asarray(part.frames * 255).round()
    # Lossy webp (quality 62 at crf 19): a few levels per pixel on average; the wrong frame is ~25 off.
    assert np.abs(got - original[3:7]).mean(axis=(1, 2, 3)).max() < 10


def test_sound_loads_back_with_its_rate_and_channels(tmp_path) -> None:
    path = saved(tmp_path, "webm", fps=12.0, audio=tone(0.75, 48000, channels=2))
    video = load(path)
    assert video.audio is not None and video.audio.sample_rate == 48000
    assert video.audio.waveform.shape[0] == 2
    # Opus records its encoder delay, so the track comes back at its length (within one 20 ms Opus frame).
    assert video.audio.seconds == pytest.approx(0.75, abs=0.02)
    assert float(video.audio.waveform.abs().max()) == pytest.approx(0.3, abs=0.05)  # lossy: a tone's peak


def test_mp4_sound_starts_on_time(tmp_path) -> None:
    path = saved(tmp_path, "mp4", fps=12.0, audio=tone(0.75, 16000))
    audio = load(path).audio
    assert audio is not None and audio.sample_rate == 16000 and audio.waveform.shape[0] == 1
    # The encoder's 1024 priming samples are dated before 0 and skipped: the tone is there from the start
    # (a lagging track would begin with 64 ms of silence).
    assert float(audio.waveform[0, :50].abs().max()) > 0.1
    # AAC pads the last 1024-sample frame: the track is at most one frame longer than written.
    assert 0.75 <= audio.seconds <= 0.75 + 1024 / 16000


def test_video_to_frames_gives_an_image_batch_rate_sound_and_count(tmp_path) -> None:
    video = tiny_video(fps=8.0, audio=tone(1.0, 8000))
    out = VideoToFrames(video=video).run(Recorder(tmp_path).ctx)
    assert out["frames"] is video.frames and out["fps"] == 8.0 and out["audio"] is video.audio
    assert out["count"] == 9


def test_too_many_frames_for_memory_is_refused_with_the_way_out(tmp_path, monkeypatch) -> None:
    path = saved(tmp_path, "mp4")
    monkeypatch.setattr(video_read, "MAX_LOAD_BYTES", 5 * 32 * 48 * 3 * 4)  # room for 5 frames
    with pytest.raises(
        ValueError, match="6 frames of 48x32 would need more than .* GiB as float32; set frame_limit"
    ):
        load(path)
    assert load(path, limit=5).count == 5


def test_a_missing_or_damaged_video_gets_one_sentence(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="^field 'path': no video at"):
        load(tmp_path / "nope.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\x00garbage" * 50)
    with pytest.raises(ValueError, match="^field 'path': .*bad.mp4: not a readable video"):
        load(bad)


def test_the_demo_runs_and_its_video_reopens(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["--run", str(DEMO), "--out", str(out), "--quiet"]) == 0
    (clip,) = out.iterdir()
    assert clip.name == "video_demo_00001.mp4"
    video = load(clip)
    assert video.count == 24 and video.size == (64, 48) and video.fps == 12.0
    assert video.audio is not None and video.audio.seconds > 1.9  # the shipped clip's 2 s tone came along
    # The saved video carries its graph: checked and run again from the mp4 itself.
    assert main(["check", str(clip)]) == 0
    assert f"{clip}: ok" in capsys.readouterr().out
    again = tmp_path / "again"
    assert main(["--run", str(clip), "--out", str(again), "--quiet"]) == 0
    assert [p.name for p in again.iterdir()] == ["video_demo_00001.mp4"]


@pytest.mark.parametrize("fmt", ["webm", "webp", "png"])
def test_every_format_reopens_with_app_check(tmp_path, capsys, fmt) -> None:
    out = tmp_path / "out"
    assert main(["--run", str(DEMO), "--out", str(out), "--quiet", "--set", f"save.format={fmt}"]) == 0
    first = sorted(out.iterdir())[0]
    assert main(["check", str(first)]) == 0, capsys.readouterr()
    assert read_workflow_json(first)["nodes"]["save"]["params"]["format"] == fmt


def test_a_video_without_a_workflow_says_so(tmp_path, capsys) -> None:
    rec = Recorder(tmp_path, None)
    SaveVideo(video=tiny_video(), prefix="bare", format="mp4", crf=19).run(rec.ctx)
    path = Path(rec.ctx.files[0])
    with pytest.raises(WorkflowError, match="this mp4 has no embedded Nodeloom workflow"):
        read_workflow_json(path)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "this mp4 has no embedded Nodeloom workflow" in err and "Traceback" not in err


def test_an_oversized_embedded_workflow_is_refused(tmp_path, monkeypatch) -> None:
    path = saved(tmp_path, "webm")
    monkeypatch.setattr(video_read, "MAX_WORKFLOW_CHARS", 10)
    with pytest.raises(
        WorkflowError, match="the embedded workflow is 5[0-9] characters; at most 10 are read"
    ):
        read_workflow_json(path)


def test_a_text_file_named_like_a_video_is_not_read_as_json(tmp_path) -> None:
    fake = tmp_path / "fake.mp4"
    fake.write_text('{"format": "nodeloom.workflow"}')
    with pytest.raises(WorkflowError, match=r"fake.mp4: not a video \(or a damaged one\)"):
        read_workflow_json(fake)


def test_damaged_video_files_are_refused_as_workflows(tmp_path) -> None:
    for name, raw in [
        ("a.mp4", b"\x00\x00\x00\x18ftyp" + b"\xff" * 40),
        ("a.webm", b"\x1a\x45\xdf\xa3" + b"\x01" * 40),
    ]:
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(WorkflowError, match="not a readable"):
            read_workflow_json(tmp_path / name)


def test_dropping_a_saved_video_opens_it_and_a_plain_one_loads_it(tmp_path) -> None:
    from app.gui.drops import classify_drop

    rec = Recorder(tmp_path, {"format": "nodeloom.workflow"})
    SaveVideo(video=tiny_video(), prefix="with", format="mp4", crf=19).run(rec.ctx)
    assert classify_drop(Path(rec.ctx.files[0])) == "workflow"
    rec = Recorder(tmp_path, None)
    SaveVideo(video=tiny_video(), prefix="plain", format="webm", crf=19).run(rec.ctx)
    assert classify_drop(Path(rec.ctx.files[0])) == "video"


def test_the_video_workflow_cap_is_the_workflow_file_cap() -> None:
    from nodes.workflow_json import MAX_FILE_BYTES

    assert video_read.MAX_WORKFLOW_CHARS == MAX_FILE_BYTES
