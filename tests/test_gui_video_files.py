"""The editor and saved videos: opening a Save Video file brings back its graph without making the video the
save target; dropping a plain video adds a Load Video node for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPointF

from app.gui.main_window import MainWindow
from nodes.video import SaveVideo
from tests.gui_support import make_window
from tests.video_support import Recorder, tiny_video

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = json.loads((REPO / "resources" / "workflows" / "text_demo.json").read_text())


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    return make_window(qtbot, tmp_path, registry)


def saved(folder: Path, fmt: str, workflow: dict | None) -> Path:
    rec = Recorder(folder, workflow)
    SaveVideo(video=tiny_video(), prefix="clip", format=fmt, crf=19).run(rec.ctx)
    return Path(rec.ctx.files[0])


@pytest.mark.parametrize("fmt", ["mp4", "webm", "webp"])
def test_opening_a_saved_video_brings_back_its_graph(window: MainWindow, tmp_path: Path, fmt) -> None:
    video = saved(tmp_path / "out", fmt, TEXT_DEMO)
    assert window.open_path(video)
    assert sorted(window.model.node_ids()) == ["greeting", "name", "save", "show"]
    assert window.path is None  # Save asks for a JSON name rather than overwriting the video


def test_dropping_a_plain_video_adds_a_load_video_node(window: MainWindow, tmp_path: Path) -> None:
    video = saved(tmp_path / "out", "mp4", None)
    (added,) = window.drop_files([video], QPointF(0, 0))
    node = window.model.node(added)
    assert node.type == "LoadVideo" and node.params["path"] == str(video)
