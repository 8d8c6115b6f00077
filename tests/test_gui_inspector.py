"""Inspector traps a new user hit: Tab and Ctrl+Z in a prompt box, seed 0, the dice button without an
emoji font, and spin-box arrows on the dark theme."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QFontMetrics, QTextCursor
from PySide6.QtWidgets import QApplication, QPushButton, QSpinBox

from app.gui.main_window import MainWindow
from app.gui.theme import apply_theme
from tests.gui_support import make_window


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    return make_window(qtbot, tmp_path, registry)


def test_tab_in_a_prompt_opens_the_palette_and_leaves_the_text_alone(qtbot, window: MainWindow) -> None:
    node = window.scene.add_node("Text", QPointF(0, 0))
    box = window.inspector.editors["text"].editor
    box.setFocus()
    qtbot.keyClicks(box, "a red circle")
    qtbot.keyClick(box, Qt.Key.Key_Tab)
    assert window.palette.isVisible()
    assert window.model.node(node).params["text"] == "a red circle"
    # What is typed next searches the palette, not the prompt.
    qtbot.keyClicks(window.palette.search, "integer")
    assert window.model.node(node).params["text"] == "a red circle"
    window.palette.hide()


def test_ctrl_z_in_a_prompt_undoes_the_typing_once(qtbot, window: MainWindow) -> None:
    node = window.scene.add_node("Text", QPointF(0, 0))
    before = window.model.node(node).params["text"]
    box = window.inspector.editors["text"].editor
    box.setFocus()
    box.selectAll()
    qtbot.keyClicks(box, "a blue square")
    assert window.model.node(node).params["text"] == "a blue square"
    count = window.undo_stack.count()
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    # Back to the text before the typing, and no new edit recorded on the undo stack.
    assert window.model.node(node).params["text"] == before
    assert window.inspector.editors["text"].editor.toPlainText() == before
    assert window.undo_stack.count() == count and window.undo_stack.canRedo()
    qtbot.keyClick(
        window.inspector.editors["text"].editor,
        Qt.Key.Key_Z,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    assert window.model.node(node).params["text"] == "a blue square"


def test_seed_zero_shows_zero_and_the_dice_button_is_readable(qtbot, window: MainWindow) -> None:
    node = window.scene.add_node("Seed", QPointF(0, 0))
    window.model.set_param(node, "seed", 0)
    window.inspector.show_node(node)
    seed = window.inspector.editors["seed"]
    assert seed.editor.text() == "0"
    dice = next(b for b in seed.findChildren(QPushButton) if "random" in b.toolTip().lower())
    metrics = QFontMetrics(dice.font())
    assert dice.text().strip() and all(metrics.inFontUcs4(ord(ch)) for ch in dice.text())


def test_spin_box_arrows_are_visible_on_the_dark_theme(qtbot) -> None:
    app = QApplication.instance()
    old_sheet, old_palette, old_style = app.styleSheet(), app.palette(), app.style().name()
    apply_theme(app)
    try:
        spin = QSpinBox()
        spin.resize(120, 28)
        qtbot.addWidget(spin)
        spin.show()
        image = spin.grab().toImage()
        # The arrow column (right 16 px): some pixels must stand out from the button background.
        lightness = [
            QColor(image.pixel(x, y)).lightness()
            for x in range(image.width() - 16, image.width() - 2)
            for y in range(2, image.height() - 2)
        ]
        assert max(lightness) - min(lightness) > 80
    finally:
        app.setStyleSheet(old_sheet)
        app.setPalette(old_palette)
        app.setStyle(old_style)


def select_only(window: MainWindow, node_id: str) -> None:
    window.scene.clearSelection()
    window.scene.node_items[node_id].setSelected(True)


def test_ctrl_z_undoes_one_typing_session_not_two(qtbot, window: MainWindow) -> None:
    """Typing, clicking another node and back, typing again: Ctrl+Z takes back only the second typing."""
    workflows = Path(__file__).resolve().parent.parent / "resources" / "workflows"
    assert window.open_path(workflows / "txt2img.json", confirm=False)
    original = window.model.node("positive").params["text"]
    select_only(window, "positive")
    box = window.inspector.editors["text"].editor
    box.setFocus()
    box.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClicks(box, ", red")
    select_only(window, "sampler")
    select_only(window, "positive")
    box = window.inspector.editors["text"].editor
    box.setFocus()
    box.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClicks(box, ", big")
    assert window.model.node("positive").params["text"] == original + ", red, big"
    qtbot.keyClick(box, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert window.model.node("positive").params["text"] == original + ", red"
    window.undo_stack.undo()
    assert window.model.node("positive").params["text"] == original


def test_a_prompt_box_losing_focus_ends_the_typing_session(qtbot, window: MainWindow) -> None:
    node = window.scene.add_node("Text", QPointF(0, 0))
    box = window.inspector.editors["text"].editor
    box.setFocus()
    qtbot.keyClicks(box, "one")
    window.view.setFocus()  # focus leaves the box, the node stays selected
    box.setFocus()
    qtbot.keyClicks(box, " two")
    window.undo_stack.undo()
    assert window.model.node(node).params["text"] == "one"
