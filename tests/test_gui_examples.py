"""The shipped examples as a new user meets them: they open as templates (Save never overwrites them),
img2img runs as shipped, and no example's nodes overlap on the canvas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.gui.main_window import MainWindow
from app.main import main
from tests.gui_support import make_window

WORKFLOWS = Path(__file__).resolve().parent.parent / "resources" / "workflows"


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    return make_window(qtbot, tmp_path, registry)


def test_a_shipped_example_opens_as_a_template_and_save_asks_where(
    window: MainWindow, tmp_path: Path, monkeypatch
) -> None:
    example = WORKFLOWS / "txt2img.json"
    before = example.read_bytes()
    assert window.open_path(example)
    assert window.path is None and "(example)" in window.windowTitle()
    window.model.set_param("positive", "text", "a large red circle on a white background")
    window._force_dirty = True
    # Enter on "Unsaved changes" means Save: it must go to Save As, not over the example.
    asked: list[bool] = []
    monkeypatch.setattr(window, "save_as", lambda: asked.append(True) or False)
    window.ask_save_changes = lambda: "save"  # type: ignore[method-assign]
    assert not window.confirm_discard()  # Save As was cancelled: keep editing
    assert asked == [True]
    assert window.save() is False and len(asked) == 2
    assert example.read_bytes() == before
    # Saving under the user's own name is an ordinary file from then on.
    mine = tmp_path / "mine.json"
    assert window.save_to(mine) and window.path == mine and "(example)" not in window.windowTitle()


def test_every_example_lays_out_without_overlapping_nodes(window: MainWindow) -> None:
    for example in sorted(WORKFLOWS.glob("*.json")):
        assert window.open_path(example, confirm=False), example.name
        items = list(window.scene.node_items.items())
        for i, (a, item_a) in enumerate(items):
            for b, item_b in items[i + 1 :]:
                overlap = item_a.sceneBoundingRect().intersects(item_b.sceneBoundingRect())
                assert not overlap, f"{example.name}: {a} overlaps {b}"


@pytest.mark.slow
def test_img2img_runs_as_shipped(tmp_path: Path) -> None:
    assert json.loads((WORKFLOWS / "img2img.json").read_text())["nodes"]["image"]["params"]["path"]
    assert main(["--run", str(WORKFLOWS / "img2img.json"), "--out", str(tmp_path), "--quiet"]) == 0
    assert list(tmp_path.glob("*.png"))


def test_file_import_hands_the_file_to_the_importer_and_opens_the_result_unsaved(
    window: MainWindow, tmp_path: Path
) -> None:
    from nodes.workflow import read_workflow_json, workflow_from_dict

    foreign = tmp_path / "comfy.json"
    foreign.write_text("{}")
    seen: list[Path] = []

    def importer(path: Path, registry):  # noqa: ANN001, ANN202
        seen.append(path)
        return workflow_from_dict(read_workflow_json(WORKFLOWS / "text_demo.json"), registry)

    assert window.import_path(foreign, importer)
    assert seen == [foreign] and window.path is None and "*" in window.windowTitle()
    assert sorted(window.model.node_ids()) == ["greeting", "name", "save", "show"]
    assert window.import_action.text() == "&Import…"
