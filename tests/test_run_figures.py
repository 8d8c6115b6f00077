"""A run's figures (frames, seconds of video, videos/hour, frames/s, images/min, s/step) are defined once
(`nodes.run_figures`) and read by the CLI report, its summary line and the editor's history; a video's history
entry gets a poster frame and shows as one row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from app.history_file import POSTERS_DIR, HistoryEntry, video_poster, with_figures
from app.main import main
from nodes.run_figures import figures_line, run_figures

REPO = Path(__file__).resolve().parent.parent
TXT2VIDEO = REPO / "resources/workflows/txt2video.json"


def _run(seconds: float = 2.0) -> dict:
    """A run that decoded and saved one 9-frame 16 fps video and saved one picture elsewhere."""
    return {
        "index": 0,
        "seconds": seconds,
        "nodes": {
            "sampler": {"type": "Sampler", "status": "ran", "outputs": []},
            "decode": {
                "type": "VAEDecodeVideo",
                "status": "ran",
                "outputs": [],
                "metrics": {"video_frames": 9.0},
            },
            "save": {
                "type": "SaveVideo",
                "status": "ran",
                "outputs": [f"/out/v_00001_{i:05d}.png" for i in range(9)],
                "metrics": {"video_frames": 9.0, "video_fps": 16.0},
            },
            "still": {"type": "SaveImage", "status": "ran", "outputs": ["/out/still_00001.png"]},
        },
    }


def test_figures_count_each_saved_video_once_and_the_pictures_apart() -> None:
    steps = [
        {"node_id": "sampler", "kind": "sampler_step", "seconds": 0.25},
        {"node_id": "sampler", "kind": "sampler_step", "seconds": 0.75},
        {"node_id": "elsewhere", "kind": "sampler_step", "seconds": 9.0},  # not a node of this run
    ]
    figures = run_figures(_run(seconds=2.0), steps)
    assert figures["videos"] == 1 and figures["frames"] == 9  # the decode's frames are not counted again
    assert figures["video_seconds"] == pytest.approx(9 / 16)
    assert figures["videos_per_hour"] == pytest.approx(1 / 2.0 * 3600)
    assert figures["frames_per_s"] == pytest.approx(9 / 2.0)
    assert figures["images"] == 1 and figures["images_per_min"] == pytest.approx(
        30.0
    )  # the frames are not images
    assert figures["s_per_step"] == pytest.approx(0.5)
    line = figures_line(figures)
    assert "9 frames (0.56 s of video)" in line and "1800.0 videos/hour" in line and "0.500 s/step" in line


def test_a_cached_video_is_not_counted_again() -> None:
    run = _run()
    run["nodes"]["save"]["status"] = "cached"
    assert "videos" not in run_figures(run)


@pytest.mark.slow  # runs the tiny Wan model
@pytest.mark.parametrize("fmt", ["png", "mp4"])
def test_the_cli_report_and_the_history_poster_of_a_video_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    args = [
        "--run",
        str(TXT2VIDEO),
        "--out",
        str(out),
        "--report",
        str(report_path),
        "--set",
        f"save.format={fmt}",
    ]
    assert main(args) == 0
    report = json.loads(report_path.read_text())
    run = report["runs"][0]
    figures = run["figures"]
    frames = json.loads(TXT2VIDEO.read_text())["nodes"]["latent"]["params"]["frames"]
    assert figures["frames"] == frames and figures["video_seconds"] == pytest.approx(frames / 16.0, abs=1e-4)
    assert figures["videos_per_hour"] == pytest.approx(3600.0 / run["seconds"], rel=1e-3)
    assert figures["s_per_step"] > 0
    assert "videos/hour" in capsys.readouterr().err  # the summary line, from the same figures

    # The history the editor reads: the same figures, and a poster frame that is not among the outputs.
    history = tmp_path / "history"
    poster = video_poster(history, run)
    assert poster and Path(poster).is_file()
    if fmt == "png":
        assert poster == sorted(run["nodes"]["save"]["outputs"])[0]  # the first frame is the poster
    else:
        assert Path(poster).parent == history / POSTERS_DIR and not (out / POSTERS_DIR).exists()
        assert Image.open(poster).size == (48, 32)  # the video's own size (under the 256 px thumbnail cap)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        Path(f).name for f in run["nodes"]["save"]["outputs"]
    )
    assert with_figures(run)["figures"]["frames"] == frames


def test_a_video_history_entry_shows_as_one_row_with_its_poster(qtbot, tmp_path: Path) -> None:
    from app.gui.history import HistoryPanel

    frames = []
    for i in range(3):
        path = tmp_path / f"v_00001_{i:05d}.png"
        Image.new("RGB", (16, 16), (80 * i, 0, 0)).save(path)
        frames.append(str(path))
    run = {
        "seconds": 1.0,
        "nodes": {
            "save": {
                "type": "SaveVideo",
                "status": "ran",
                "outputs": frames,
                "metrics": {"video_frames": 3.0, "video_fps": 16.0},
            }
        },
    }
    report = with_figures(run)
    entry = HistoryEntry(1_764_569_460.0, "txt2video.json", {}, {}, frames, {}, report, poster=frames[0])
    panel = HistoryPanel()
    qtbot.addWidget(panel)
    panel.add(entry)
    assert panel.list.count() == 1  # one row for the video, not one per frame
    item = panel.list.item(0)
    assert not item.icon().isNull() and "3 frames" in item.toolTip() and "videos/hour" in item.toolTip()


@pytest.mark.slow  # runs the tiny Wan model in the editor
def test_the_editor_logs_the_figures_and_keeps_a_poster_for_a_video_run(
    qtbot, tmp_path: Path, registry
) -> None:
    from app.history_file import read_history
    from tests.test_gui_run import make_window, wait_until

    window = make_window(qtbot, tmp_path, registry)
    assert window.open_path(TXT2VIDEO)
    window.model.set_param("save", "format", "mp4")
    window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 240)
    assert window.last_result.ok, window.last_result.error
    assert "videos/hour" in window.output.log.toPlainText()  # the CLI's line, from the same figures
    (entry,) = read_history(tmp_path / "outputs")
    assert entry.report["figures"]["frames"] == 9 and entry.poster.endswith(".png")
    assert Path(entry.poster).parent == tmp_path / "outputs" / POSTERS_DIR and Path(entry.poster).is_file()
    assert window.history_panel.list.count() == 1 and not window.history_panel.list.item(0).icon().isNull()
