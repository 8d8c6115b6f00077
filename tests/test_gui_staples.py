"""Bypass and mute (nodes and groups), renamed titles, find in graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from app.gui import node_item, theme
from app.gui.history import read_history
from app.gui.main_window import MainWindow
from nodes.workflow import workflow_from_dict
from tests import gui_support
from tests.nodes_for_tests import Calls, make_registry
from tests.test_gui_run import wait_until


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    window = gui_support.make_window(qtbot, tmp_path, make_registry(Calls()), for_runs=True)
    window.model.load(
        workflow_from_dict(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {
                    "three": {"type": "Number", "params": {"value": 3}},
                    "four": {"type": "Number", "params": {"value": 4}},
                    "add": {"type": "Add", "inputs": {"a": ["three", "value"], "b": ["four", "value"]}},
                    "text": {
                        "type": "ToText",
                        "params": {"style": "dec"},
                        "inputs": {"value": ["add", "value"]},
                    },
                    "save": {
                        "type": "SaveText",
                        "params": {"prefix": "sum"},
                        "inputs": {"text": ["text", "text"]},
                    },
                },
                "ui": {
                    "nodes": {
                        "three": {"pos": [0, 0]},
                        "four": {"pos": [0, 200]},
                        "add": {"pos": [300, 0]},
                        "text": {"pos": [600, 0]},
                        "save": {"pos": [900, 0]},
                    }
                },
            },
            window.registry,
        )
    )
    return window


def run_and_read(window: MainWindow, out: Path) -> list[str]:
    for old in out.glob("sum*.txt"):
        old.unlink()
    window.last_result = None
    assert window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    return [p.read_text() for p in out.glob("sum*.txt")]


def test_bypass_passes_the_input_through_and_mute_skips(qtbot, window: MainWindow, tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    assert run_and_read(window, out) == ["7"]
    window.scene.clearSelection()
    window.scene.node_items["add"].setSelected(True)
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)
    assert window.scene.node_items["add"].mode() == "bypass"
    assert run_and_read(window, out) == ["3"]  # Add passed its first INT input through
    # The output history keeps the graph as edited: reopening it brings the bypassed node back.
    assert read_history(out)[-1].workflow["ui"]["nodes"]["add"]["mode"] == "bypass"
    qtbot.keyClick(window.view, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)  # again: back to normal
    window.scene.clearSelection()
    window.scene.node_items["save"].setSelected(True)
    qtbot.keyClick(window.view, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert window.scene.node_items["save"].opacity() < 1
    assert run_and_read(window, out) == []
    # Saved with the file, and a headless-shaped copy shows it: the mode lives in the ui section.
    assert window.model.to_workflow().ui["nodes"]["save"]["mode"] == "mute"


def test_a_group_bypasses_every_node_inside(window: MainWindow, tmp_path: Path) -> None:
    window.scene.clearSelection()
    window.scene.node_items["add"].setSelected(True)
    window.scene.group_selection("Maths")
    window.scene.clearSelection()
    window.scene.group_items[-1].setSelected(True)
    window.toggle_mode("bypass")
    assert window.scene.node_items["add"].mode() == "bypass"
    assert run_and_read(window, tmp_path / "outputs") == ["3"]


def test_rename_shows_on_the_canvas_and_find_jumps_to_it(window: MainWindow, tmp_path: Path) -> None:
    window.rename_node("add", "Sum of both")
    assert window.scene.node_items["add"].title() == "Sum of both"
    path = tmp_path / "renamed.json"
    assert window.save_to(path)
    assert window.open_path(path, confirm=False)
    assert window.scene.node_items["add"].title() == "Sum of both"
    window.scene.clearSelection()
    assert window.find_in_graph("sum of") == "add"
    assert window.scene.node_items["add"].isSelected()
    assert window.find_in_graph("totext") == "text"
    assert window.find_in_graph("nothing like this") is None


def test_a_headless_run_honours_the_modes_saved_by_the_editor(tmp_path: Path) -> None:
    from app.main import main

    wf = json.loads(
        (Path(__file__).resolve().parent.parent / "resources/workflows/text_demo.json").read_text()
    )
    out = tmp_path / "out"
    assert main(["--run", str(_write(tmp_path / "a.json", wf)), "--out", str(out), "--quiet"]) == 0
    assert list(out.glob("*.txt"))
    wf["ui"]["nodes"].setdefault("save", {})["mode"] = "mute"
    muted = tmp_path / "muted"
    assert main(["--run", str(_write(tmp_path / "b.json", wf)), "--out", str(muted), "--quiet"]) == 0
    assert not list(muted.glob("*.txt"))


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_find_again_cycles_through_every_match(qtbot, window: MainWindow) -> None:
    # "three" and "four" are both Numbers: the same search reaches the second one, then wraps.
    assert window.find_in_graph("number") == "three"
    assert window.find_in_graph("number") == "four"
    assert "2 of 2" in window.statusBar().currentMessage()
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_F3)  # Find Next
    assert window.scene.node_items["three"].isSelected()
    assert "1 of 2" in window.statusBar().currentMessage()


def test_rename_with_nothing_selected_says_what_to_do(qtbot, window: MainWindow) -> None:
    window.scene.clearSelection()
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_F2)
    assert window.statusBar().currentMessage() == "Select a node to rename"


def test_the_toolbar_undo_label_stays_short(window: MainWindow) -> None:
    run_button = window.findChild(QWidget, "runButton")
    x_before = run_button.x()
    window.rename_node("add", "A much longer title that makes a long undo text")
    assert window.tool_undo_action.text() == "Undo"
    assert window.tool_undo_action.isEnabled()
    assert "Rename add" in window.tool_undo_action.toolTip()
    assert run_button.x() == x_before  # Run does not move as the undo text changes
    window.tool_undo_action.trigger()
    assert window.scene.node_items["add"].title() != "A much longer title that makes a long undo text"


def _luminance(color: QColor) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF()) + 0.0722 * channel(color.blueF())


def _over(top: QColor, below: QColor) -> QColor:
    a = top.alphaF()
    mix = [a * t + (1 - a) * b for t, b in zip(top.getRgbF()[:3], below.getRgbF()[:3], strict=True)]
    return QColor.fromRgbF(*mix)


def test_the_bypassed_badge_reads_on_its_purple_header(window: MainWindow) -> None:
    window.toggle_mode("bypass", ["add"])
    item = window.scene.node_items["add"]
    text, color = item.badge()
    assert text == "bypassed"
    # Drawn on its dark pill over the purple veil: WCAG contrast at least 4.5 (normal text).
    background = _over(node_item.BADGE_BACKGROUND, QColor(theme.BYPASS))
    lighter, darker = sorted((_luminance(color), _luminance(background)), reverse=True)
    assert (lighter + 0.05) / (darker + 0.05) >= 4.5


def test_the_find_bar_is_typed_into_and_steps_with_enter(qtbot, window: MainWindow) -> None:
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    bar = window.find_bar
    assert bar.isVisible() and bar.field.hasFocus()  # non-modal: the canvas stays usable
    qtbot.keyClicks(bar.field, "number")
    assert window.scene.node_items["three"].isSelected() and bar.count.text() == "1 of 2"
    qtbot.keyClick(bar.field, Qt.Key.Key_Return)
    assert window.scene.node_items["four"].isSelected() and bar.count.text() == "2 of 2"
    qtbot.keyClick(bar.field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.scene.node_items["three"].isSelected() and bar.count.text() == "1 of 2"
    qtbot.keyClicks(bar.field, "zzz")
    assert bar.count.text() == "no match"
    qtbot.keyClick(bar.field, Qt.Key.Key_Escape)
    assert not bar.isVisible()
