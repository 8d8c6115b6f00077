"""Editor tests (pytest-qt, offscreen): build a graph through the palette and wire drags, refused wires,
undo/redo of every edit, copy/paste/duplicate, delete, groups and the inspector's widgets."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
)

from app.gui.main_window import MainWindow
from tests.gui_support import make_window


@pytest.fixture
def window(qtbot, tmp_path: Path, registry) -> MainWindow:
    return make_window(qtbot, tmp_path, registry)


def insert(qtbot, window: MainWindow, query: str, x: float, y: float) -> str:
    """Open the palette at a canvas position, type a query, press Enter; returns the new node id."""
    before = set(window.model.node_ids())
    window.open_palette(QPointF(x, y))
    assert window.palette.isVisible()
    qtbot.keyClicks(window.palette.search, query)
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Return)
    (new,) = set(window.model.node_ids()) - before
    return new


def drag(qtbot, window: MainWindow, start: QPointF, end: QPointF) -> None:
    """A real mouse drag on the canvas between two scene positions."""
    viewport = window.view.viewport()
    a, b = window.view.mapFromScene(start), window.view.mapFromScene(end)
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=a)
    qtbot.mouseMove(viewport, pos=(a + b) / 2)
    qtbot.mouseMove(viewport, pos=b)
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=b)


def port_pos(window: MainWindow, node: str, port: str, direction: str) -> QPointF:
    item = window.scene.node_items[node].port(port, direction)
    assert item is not None
    return item.scenePos()


def test_fuzzy_palette_inserts_the_best_match_where_asked(qtbot, window: MainWindow) -> None:
    node = insert(qtbot, window, "frmt txt", 100, 60)
    assert window.model.node(node).type == "FormatText"
    assert window.model.pos(node) == (100.0, 60.0)
    assert window.scene.node_items[node].isSelected()
    assert window.inspector.node_id == node  # the new node is ready to edit
    assert not window.palette.isVisible()


def test_drag_wires_between_compatible_ports_and_refuses_others(qtbot, window: MainWindow) -> None:
    window.view.set_zoom(1.0)
    window.view.centerOn(300, 100)
    text = insert(qtbot, window, "Text", 0, 0)
    save = insert(qtbot, window, "Save Text", 400, 0)
    number = insert(qtbot, window, "Integer", 0, 200)
    drag(qtbot, window, port_pos(window, text, "text", "out"), port_pos(window, save, "text", "in"))
    assert [(c.out_node, c.in_node, c.in_port) for c in window.model.connections()] == [(text, save, "text")]
    assert window.statusBar().currentMessage().startswith("Connected")
    # INT into TEXT: refused, the reason is in the status bar and the old wire stays.
    drag(qtbot, window, port_pos(window, number, "value", "out"), port_pos(window, save, "text", "in"))
    assert len(window.model.connections()) == 1
    message = window.statusBar().currentMessage()
    assert "Can't connect" in message and "INT" in message and "TEXT" in message
    # Lift the wire off the input and drop it on empty canvas: disconnected, and undoable.
    drag(qtbot, window, port_pos(window, save, "text", "in"), QPointF(250, 300))
    assert window.model.connections() == []
    window.undo_stack.undo()
    assert len(window.model.connections()) == 1


def test_compatible_ports_highlight_while_dragging(qtbot, window: MainWindow) -> None:
    text = insert(qtbot, window, "Text", 0, 0)
    save = insert(qtbot, window, "Save Text", 400, 0)
    number = insert(qtbot, window, "Integer", 0, 200)
    origin = window.scene.node_items[text].port("text", "out")
    window.scene.begin_wire(origin, QPointF(200, 50))
    assert window.scene.node_items[save].port("text", "in").highlight == "ok"
    assert window.scene.node_items[save].port("prefix", "in").highlight == "ok"  # STRING param takes TEXT
    assert window.scene.node_items[number].port("value", "in").highlight == "no"
    window.scene.end_wire(QPointF(-500, -500))
    assert window.scene.node_items[save].port("text", "in").highlight is None


def test_every_edit_undoes_and_redoes(qtbot, window: MainWindow) -> None:
    states = [window.model.to_workflow().to_dict()]

    def step() -> None:
        states.append(window.model.to_workflow().to_dict())

    text = insert(qtbot, window, "Text", 0, 0)
    step()
    fmt = insert(qtbot, window, "Format Text", 300, 0)
    step()
    assert window.scene.try_connect(text, "text", fmt, "a")[0]
    step()
    window.scene.clearSelection()
    window.scene.node_items[text].setSelected(True)
    box = window.inspector.editors["text"].editor
    assert isinstance(box, QPlainTextEdit)
    box.setPlainText("a cat")  # typing into the prompt box is one undo step
    assert window.model.node(text).params["text"] == "a cat"
    step()
    window.scene.node_items[fmt].setPos(340, 80)  # what a drag leaves behind
    window.scene.commit_moves()
    step()
    window.scene.clearSelection()
    window.scene.node_items[text].setSelected(True)
    window.scene.group_selection("Prompt")
    step()
    window.scene.clearSelection()
    window.scene.node_items[text].setSelected(True)
    qtbot.keyClick(window.view, Qt.Key.Key_Delete)
    assert text not in window.model.node_ids()
    step()
    assert window.undo_stack.count() == len(states) - 1
    for expected in reversed(states[:-1]):
        window.undo_stack.undo()
        assert window.model.to_workflow().to_dict() == expected
    assert window.scene.node_items == {}
    for expected in states[1:]:
        window.undo_stack.redo()
        assert window.model.to_workflow().to_dict() == expected
    assert set(window.scene.node_items) == {fmt}  # the scene followed the model all the way


def test_a_drag_of_several_nodes_is_one_undo_step(qtbot, window: MainWindow) -> None:
    a = insert(qtbot, window, "Text", 0, 0)
    b = insert(qtbot, window, "Text", 0, 200)
    count = window.undo_stack.count()
    for i in range(1, 6):  # the intermediate positions of one drag
        window.scene.node_items[a].setPos(10 * i, 0)
        window.scene.node_items[b].setPos(10 * i, 200)
        window.scene.commit_moves()
    assert window.undo_stack.count() == count + 1
    window.undo_stack.undo()
    assert window.model.pos(a) == (0.0, 0.0) and window.model.pos(b) == (0.0, 200.0)


def test_copy_paste_and_duplicate_keep_inner_wires(qtbot, window: MainWindow) -> None:
    text = insert(qtbot, window, "Text", 0, 0)
    fmt = insert(qtbot, window, "Format Text", 300, 0)
    window.scene.try_connect(text, "text", fmt, "a")
    window.select_all()
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
    assert set(window.model.node_ids()) == {text, fmt, "text_2", "format_text_2"}
    assert window.model.input_link("format_text_2", "a").node == "text_2"
    assert set(window.scene.selected_node_ids()) == {"text_2", "format_text_2"}
    qtbot.keyClick(window.view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window.view, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert len(window.model.node_ids()) == 6
    window.undo_stack.undo()
    window.undo_stack.undo()
    assert set(window.model.node_ids()) == {text, fmt}


def test_group_drags_its_nodes_and_renames(qtbot, window: MainWindow, monkeypatch) -> None:
    a = insert(qtbot, window, "Text", 0, 0)
    window.scene.group_selection("Inputs")
    group = window.scene.group_items[0]
    original = list(window.model.groups()[0]["rect"])
    assert window.model.groups()[0]["title"] == "Inputs"
    outside = insert(qtbot, window, "Text", 900, 900)
    window.scene.clearSelection()
    # Drag the group by its title bar.
    title = group.scenePos() + QPointF(40, 10)
    window.view.centerOn(title)
    drag(qtbot, window, title, title + QPointF(100, 60))
    assert window.model.pos(a) == (100.0, 60.0)
    assert window.model.groups()[0]["rect"][:2] == [original[0] + 100, original[1] + 60]
    assert window.model.pos(outside) == (900.0, 900.0)
    window.undo_stack.undo()  # group and node move back together: one step
    assert window.model.pos(a) == (0.0, 0.0)
    assert window.model.groups()[0]["rect"] == original
    monkeypatch.setattr("app.gui.scene.QInputDialog.getText", lambda *a, **k: ("Prompt", True))
    window.scene.rename_group(0)
    assert window.model.groups()[0]["title"] == "Prompt"


def test_inspector_has_a_widget_for_each_kind_of_parameter(qtbot, window: MainWindow) -> None:
    def editor(query: str, name: str):
        node = insert(qtbot, window, query, 0, 0)
        return node, window.inspector.editors[name]

    assert isinstance(editor("Text", "text")[1].editor, QPlainTextEdit)
    spin = editor("Integer", "value")[1].editor
    assert isinstance(spin, QSpinBox) and spin.minimum() < 0 < spin.maximum()
    assert isinstance(editor("Float", "value")[1].editor, QDoubleSpinBox)
    assert isinstance(editor("Boolean", "value")[1].editor, QCheckBox)
    assert any(b.text() == "Browse…" for b in editor("Load Image", "path")[1].findChildren(QPushButton))
    # The dice gives the seed a new random value, through an undoable command.
    seed_node, seed_editor = editor("Seed", "seed")
    count = window.undo_stack.count()
    next(b for b in seed_editor.findChildren(QPushButton) if b.objectName() == "diceButton").click()
    assert window.undo_stack.count() == count + 1
    assert window.model.node(seed_node).params["seed"] == int(seed_editor.editor.text())
    # A wired parameter shows where its value comes from instead of a widget.
    save, prefix = editor("Save Text", "prefix")
    assert isinstance(prefix.editor, QLineEdit)
    window.scene.try_connect("text", "text", save, "prefix")
    assert "prefix" not in window.inspector.editors


def test_choice_params_use_a_combo(qtbot, window: MainWindow, registry) -> None:
    spec = next(s for s in registry if any(p.kind == "choice" for p in s.params))
    param = next(p for p in spec.params if p.kind == "choice")
    node = window.scene.add_node(spec.type, QPointF(0, 0))
    combo = window.inspector.editors[param.name].editor
    assert isinstance(combo, QComboBox) and combo.count() == len(param.choices)
    combo.setCurrentIndex(combo.count() - 1)
    assert window.model.node(node).params[param.name] == param.choices[-1]


def test_zoom_fit_pan_and_palette_keys(qtbot, window: MainWindow) -> None:
    a = insert(qtbot, window, "Text", 0, 0)
    b = insert(qtbot, window, "Text", 2000, 1200)
    window.view.set_zoom(1.0)
    window.view.centerOn(0, 0)
    qtbot.keyClick(window.view, Qt.Key.Key_F)
    visible = window.view.mapToScene(window.view.viewport().rect()).boundingRect()
    for nid in (a, b):
        assert visible.contains(window.scene.node_items[nid].sceneBoundingRect())
    zoom = window.view.zoom()
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QWheelEvent

    center = QPointF(window.view.viewport().rect().center())
    wheel = QWheelEvent(
        center,
        window.view.mapToGlobal(center),
        QPoint(0, 0),
        QPoint(0, 240),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    window.view.wheelEvent(wheel)
    assert window.view.zoom() > zoom
    before = window.view.mapToScene(window.view.viewport().rect().center())
    viewport = window.view.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.MiddleButton, pos=QPoint(300, 300))
    qtbot.mouseMove(viewport, pos=QPoint(200, 250))
    qtbot.mouseRelease(viewport, Qt.MouseButton.MiddleButton, pos=QPoint(200, 250))
    after = window.view.mapToScene(window.view.viewport().rect().center())
    assert after.x() > before.x() and after.y() > before.y()  # dragging left/up shows what is right/below
    # Palette: Down picks the second match, Esc closes without inserting.
    window.open_palette(QPointF(0, 0))
    qtbot.keyClicks(window.palette.search, "text")
    second = window.palette.list.item(1).data(Qt.ItemDataRole.UserRole)
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Down)
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Return)
    assert window.model.node(window.scene.selected_node_ids()[0]).type == second
    window.open_palette(QPointF(0, 0))
    count = len(window.model.node_ids())
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Escape)
    assert not window.palette.isVisible() and len(window.model.node_ids()) == count


def test_selecting_a_wire_and_pressing_delete_removes_only_it(qtbot, window: MainWindow) -> None:
    text = insert(qtbot, window, "Text", 0, 0)
    save = insert(qtbot, window, "Save Text", 400, 0)
    window.scene.try_connect(text, "text", save, "text")
    window.scene.clearSelection()
    (edge,) = window.scene.edge_items.values()
    edge.setSelected(True)
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_Backspace)
    assert window.model.connections() == [] and set(window.model.node_ids()) == {text, save}
    window.undo_stack.undo()
    assert len(window.model.connections()) == 1


def test_dropping_a_wire_on_empty_canvas_offers_matching_nodes_and_wires_the_choice(qtbot, window) -> None:
    window.view.set_zoom(1.0)
    window.view.centerOn(200, 100)
    number = insert(qtbot, window, "Integer", 0, 0)
    drag(qtbot, window, port_pos(window, number, "value", "out"), QPointF(350, 150))
    assert window.palette.isVisible()
    offered = {
        window.palette.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(window.palette.list.count())
    }
    assert "SaveText" not in offered  # takes TEXT or STRING, not INT
    assert "EmptyLatent" in offered  # its width param takes an INT wire
    count = window.undo_stack.count()
    qtbot.keyClicks(window.palette.search, "empty latent")
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Return)
    (new,) = set(window.model.node_ids()) - {number}
    assert window.model.node(new).type == "EmptyLatent"
    (conn,) = window.model.connections()
    assert (conn.out_node, conn.in_node) == (number, new)
    assert window.undo_stack.count() == count + 1  # node and wire are one step
    window.undo_stack.undo()
    assert window.model.node_ids() == [number]


def test_tab_and_double_click_on_empty_canvas_open_the_palette(qtbot, window: MainWindow) -> None:
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key.Key_Tab)
    assert window.palette.isVisible()
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Escape)
    spot = window.view.viewport().rect().center()
    qtbot.mouseDClick(window.view.viewport(), Qt.MouseButton.LeftButton, pos=spot)
    assert window.palette.isVisible()
    qtbot.keyClicks(window.palette.search, "seed")
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Return)
    (node,) = window.model.node_ids()
    expected = window.view.mapToScene(spot)
    x, y = window.model.pos(node)
    assert abs(x - expected.x()) <= 20 and abs(y - expected.y()) <= 20  # at the click, snapped to the grid


def test_arrow_keys_nudge_the_selection_as_one_undo_step(qtbot, window: MainWindow) -> None:
    node = insert(qtbot, window, "Text", 0, 0)
    window.view.setFocus()
    count = window.undo_stack.count()
    for _ in range(3):
        qtbot.keyClick(window.view, Qt.Key.Key_Right)
    qtbot.keyClick(window.view, Qt.Key.Key_Down, Qt.KeyboardModifier.ShiftModifier)
    assert window.model.pos(node) == (60.0, 100.0)
    assert window.undo_stack.count() == count + 1
    window.undo_stack.undo()
    assert window.model.pos(node) == (0.0, 0.0)


def test_space_drag_pans_instead_of_selecting(qtbot, window: MainWindow) -> None:
    from PySide6.QtCore import QPoint

    insert(qtbot, window, "Text", 0, 0)
    window.scene.clearSelection()
    window.view.setFocus()
    before = window.view.mapToScene(window.view.viewport().rect().center())
    qtbot.keyPress(window.view, Qt.Key.Key_Space)
    viewport = window.view.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=QPoint(400, 400))
    qtbot.mouseMove(viewport, pos=QPoint(300, 300))
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=QPoint(300, 300))
    qtbot.keyRelease(window.view, Qt.Key.Key_Space)
    after = window.view.mapToScene(window.view.viewport().rect().center())
    assert after.x() > before.x() and after.y() > before.y()
    assert window.scene.selectedItems() == []  # no rubber band happened


def test_a_group_resizes_from_its_corner_in_one_undo_step(qtbot, window: MainWindow) -> None:
    insert(qtbot, window, "Text", 0, 0)
    window.scene.group_selection("G")
    window.scene.clearSelection()
    x, y, w, h = window.model.groups()[0]["rect"]
    window.view.centerOn(x + w, y + h)
    drag(qtbot, window, QPointF(x + w - 4, y + h - 4), QPointF(x + w + 96, y + h + 56))
    nx, ny, nw, nh = window.model.groups()[0]["rect"]
    assert (nx, ny) == (x, y) and abs(nw - (w + 100)) <= 2 and abs(nh - (h + 60)) <= 2
    window.undo_stack.undo()
    assert window.model.groups()[0]["rect"] == [x, y, w, h]


def test_a_wire_dropped_on_a_node_body_takes_its_first_fitting_input(qtbot, window: MainWindow) -> None:
    window.view.set_zoom(1.0)
    window.view.centerOn(200, 50)
    text = insert(qtbot, window, "Text", 0, 0)
    fmt = insert(qtbot, window, "Format Text", 300, 0)
    body = window.scene.node_items[fmt].sceneBoundingRect().center()
    drag(qtbot, window, port_pos(window, text, "text", "out"), body)
    drag(qtbot, window, port_pos(window, text, "text", "out"), body)
    assert sorted(c.in_port for c in window.model.connections()) == ["a", "b"]  # a taken, so b next
