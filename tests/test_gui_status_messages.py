"""What the window tells the user about refusals: the status bar says a run was refused (not the previous
run's failure), long messages elide before the RSS label with the whole text in the tooltip, and problems
in an example's unsaved copy never cite the installed example's path."""

from __future__ import annotations

from pathlib import Path

from app.gui.main_window import MainWindow
from pipelines.paths import RESOURCES_DIR
from tests.gui_support import make_window

TXT2IMG = Path(__file__).resolve().parent.parent / "resources" / "workflows" / "txt2img.json"


def refused_txt2img(window: MainWindow) -> None:
    assert window.open_path(TXT2IMG, confirm=False)
    window.model.set_inputs({("sampler", "positive"): None})
    assert not window.run_workflow()


def test_a_refused_run_says_so_in_the_status_bar(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.status("Run failed: out of memory in sampler")  # what the previous run left there
    refused_txt2img(window)
    message = window.statusBar().currentMessage()
    assert message.startswith("Cannot run yet") and "sampler.positive" in message


def test_a_long_status_message_elides_before_the_memory_label(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.resize(700, 500)
    window.memory_label.setText("RSS 1,234 MiB · budget 20,000 MiB")
    long = "sampler: loading unet weights from a very long path " + "x" * 200
    window.status(long)
    qtbot.wait(10)
    bar = window.statusBar()
    assert bar.toolTip() == long
    shown = bar.shown_text()
    assert shown.endswith("…") and long.startswith(shown[:-1])
    assert bar.message_rect().right() < window.memory_label.geometry().left()


def test_problems_in_an_example_copy_name_the_untitled_copy(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    refused_txt2img(window)
    details = window.problem_dialog.detailedText()
    assert "Untitled (from example txt2img.json)" in details
    assert str(RESOURCES_DIR) not in details and "resources/workflows" not in details
    # Once saved, messages name the saved file.
    saved = tmp_path / "mine.json"
    assert window.save_to(saved)
    assert not window.run_workflow()
    assert str(saved) in window.problem_dialog.detailedText()


def test_problems_in_a_new_graph_name_it_untitled(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    for _ in range(2):  # the graph the window starts with, then File > New
        window.model.add_node("SaveText", (0, 0))
        assert not window.run_workflow()
        assert window.problem_dialog.detailedText().startswith("Untitled: node 'save_text'")
        window.new_file()
