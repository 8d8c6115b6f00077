"""The output history tells runs apart: a re-run that made nothing new adds nothing, a cancelled run says
so, and each row names its workflow, seed and a one-line text snippet."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.gui.history import HistoryEntry, HistoryPanel, read_history
from tests import gui_support
from tests.nodes_for_tests import Calls, make_registry
from tests.test_gui_queue_history import seeded_graph
from tests.test_gui_run import wait_until

SHAPES = Path(__file__).resolve().parent.parent / "resources" / "images" / "shapes_sample.png"


def panel_with(qtbot, entry: HistoryEntry) -> HistoryPanel:  # noqa: ANN001
    panel = HistoryPanel()
    qtbot.addWidget(panel)
    panel.add(entry)
    return panel


def test_a_picture_row_names_its_workflow_and_seed(qtbot) -> None:
    entry = HistoryEntry(
        1_764_569_460.0, "txt2img.json (sampler.seed=42)", {}, {"sampler.seed": 42}, [str(SHAPES)]
    )
    panel = panel_with(qtbot, entry)
    text = panel.list.item(0).text()
    assert text.startswith("txt2img.json · seed 42 · ") and text.count("42") == 1


def test_a_text_row_is_one_readable_line(qtbot) -> None:
    reply = "The quick brown fox\njumps over the lazy dog and keeps running far beyond the hills " * 3
    entry = HistoryEntry(1_764_569_460.0, "llm_chat.json", {}, {}, [], {"llm": reply})
    panel = panel_with(qtbot, entry)
    label = panel.list.item(0).text()
    snippet = label.splitlines()[-1]
    assert snippet.startswith("llm: The quick brown fox jumps over")  # the newline became a space
    assert panel.list.wordWrap() is False and panel.list.textElideMode() == Qt.TextElideMode.ElideRight
    # Laid out as a row across the list, not a narrow icon-grid column.
    panel.resize(400, 300)
    panel.show()
    rect = panel.list.visualItemRect(panel.list.item(0))
    assert 300 < rect.width() <= panel.list.viewport().width()  # elided within the list, no side-scrolling
    assert reply[:2000] in panel.list.item(0).toolTip()


def test_a_cancelled_run_says_cancelled(qtbot) -> None:
    report = {"ok": False, "cancelled": True, "error": "cancelled"}
    entry = HistoryEntry(1_764_569_460.0, "llm_chat.json", {}, {}, [], {"llm": "Once upon"}, report)
    panel = panel_with(qtbot, entry)
    item = panel.list.item(0)
    assert "cancelled" in item.text().lower() and "cancelled" in item.toolTip().lower()
    normal = panel_with(qtbot, HistoryEntry(1_764_569_460.0, "llm_chat.json", {}, {}, [], {"llm": "Hi"}))
    assert "cancelled" not in normal.list.item(0).text().lower()


@pytest.mark.slow
def test_rerunning_an_unchanged_graph_adds_no_history_entry(qtbot, tmp_path: Path) -> None:
    window = gui_support.make_window(qtbot, tmp_path, make_registry(Calls()), for_runs=True)
    seeded_graph(window, delay=0.0)
    for _ in range(2):
        window.last_result = None
        assert window.run_workflow()
        wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    assert all(r.status == "cached" for r in window.last_result.nodes.values())
    assert len(read_history(tmp_path / "outputs")) == 1
    assert window.history_panel.list.count() == 1
    # A change that makes a new file is a new entry.
    window.model.set_param("seed", "seed", 9)
    window.last_result = None
    assert window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    assert len(read_history(tmp_path / "outputs")) == 2
