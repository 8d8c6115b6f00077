"""The Output dock's main picture is the run's saved result, and another graph starts with an empty dock."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from app.gui.output_panel import OutputPanel
from tests.gui_support import make_window

SHAPES = Path(__file__).resolve().parent.parent / "resources" / "images" / "shapes_sample.png"
WORKFLOWS = Path(__file__).resolve().parent.parent / "resources" / "workflows"


def test_the_saved_picture_stays_the_main_view_after_a_side_preview(qtbot) -> None:
    """ControlNet: Save Image writes the result, then the edge map's final preview arrives."""
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.new_run()
    panel.show_preview("sampler", Image.new("RGB", (32, 32)), final=False)
    panel.add_file("save", str(SHAPES))
    panel.show_preview("show_edges", Image.new("RGB", (64, 64), "white"), final=True)
    panel.finish_run()
    saved = Image.open(SHAPES).size
    assert panel.view._image is not None and (panel.view._image.width(), panel.view._image.height()) == saved
    assert panel.caption.text().startswith("save: shapes_sample.png")
    # A run that saves nothing still shows its final preview.
    panel.new_run()
    panel.show_preview("show_edges", Image.new("RGB", (64, 64), "white"), final=True)
    panel.finish_run()
    assert panel.caption.text() == "show_edges: final 64×64"


def test_opening_another_workflow_clears_the_output_dock(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.output.new_run()
    window.output.add_file("save", str(SHAPES))
    window.output.append_text("llm", "hello")
    assert window.output.files.count() == 1
    assert window.open_path(WORKFLOWS / "txt2img.json", confirm=False)
    assert window.output.files.count() == 0 and window.output.view._image is None
    assert window.output.text.toPlainText() == "" and window.output.caption.text() == ""
    window.output.add_file("save", str(SHAPES))
    window.new_file()
    assert window.output.files.count() == 0


def test_a_run_whose_save_was_cached_ends_on_the_saved_picture(qtbot) -> None:
    """Re-running with only the edge branch changed: Save Image is cached, its file is still the result."""
    panel = OutputPanel()
    qtbot.addWidget(panel)
    panel.new_run()
    panel.show_preview("show_edges", Image.new("RGB", (64, 64), "white"), final=True)
    panel.finish_run([("save", str(SHAPES))])
    assert panel.caption.text().startswith("save: shapes_sample.png")
