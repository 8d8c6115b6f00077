"""The inspector dock: editable parameter widgets for the selected node.

Lives here: `Inspector`, `ParamEditor`. Imports Qt, `app.gui.model_picker`, `nodes.spec`, `nodes.graph_model`.
Widgets by the kind's `widget` name (`WIDGETS`, the one table from name to builder): multiline prompt box
(text), spin boxes with the param's range and step (int, float), combos (choice), check boxes (bool), a line
edit with a file picker using the param's `file_filter` (path), and a seed field with a dice button. A loader's weights field also searches the models library as you type
(`app.gui.model_picker`). Edits go out as `edited(node_id, name, value)`; the window pushes an
undo command and the model's notification comes back through `show_value`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFocusEvent, QKeyEvent, QKeySequence, QRegularExpressionValidator, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui import theme
from app.gui.model_picker import ModelChoice, ModelCompleter, is_model_field
from app.gui.run_queue import SEED_MODES
from nodes.graph_model import GraphModel
from nodes.spec import Param

if TYPE_CHECKING:
    from pipelines.diffusion.sizes import ImageSize

INT32 = 2**31 - 1


_UNDO_KEYS = (QKeySequence.StandardKey.Undo, QKeySequence.StandardKey.Redo)


class PromptEdit(QPlainTextEdit):
    """A multi-line text box that leaves Tab and Ctrl+Z to the window.

    Tab asks for the node palette (as on the canvas) instead of inserting a tab character. Undo/redo go
    to the graph's undo stack, where typing is one merged edit: the box's own undo would wipe the text and
    record that as a new edit.
    """

    tab_pressed = Signal()
    focus_lost = Signal()  # ends a typing session: the next typing is a new undo step

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setUndoRedoEnabled(False)

    def focusOutEvent(self, event: QFocusEvent) -> None:  # noqa: N802 (Qt name)
        self.focus_lost.emit()
        super().focusOutEvent(event)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent):
            if any(event.matches(k) for k in _UNDO_KEYS):
                event.ignore()  # not ours: the window's Undo/Redo shortcut gets the key
                return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Tab and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            self.tab_pressed.emit()
            return
        super().keyPressEvent(event)

    def set_text_keep_cursor(self, text: str) -> None:
        self.setPlainText(text)
        self.moveCursor(QTextCursor.MoveOperation.End)


class ParamEditor(QWidget):
    """One parameter's widget; `set_value` never re-emits."""

    changed = Signal(object)
    tab_pressed = Signal()
    session_ended = Signal()  # the prompt box lost focus

    def __init__(
        self, param: Param, value: Any, parent: QWidget | None = None, size: ImageSize | None = None
    ) -> None:
        super().__init__(parent)
        self.param = param
        self._quiet = False
        self.picker: ModelCompleter | None = None  # a loader's weights field: the models library
        # A picture size (Empty Latent's width/height) follows the connected model: steps by its multiple.
        self.multiple = size.multiple if size is not None and param.zero_is_native_size else None
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.editor: QWidget
        self._get: Callable[[], Any]
        self._set: Callable[[Any], None]
        self._shown: Callable[[], Any] | None = None  # what the widget shows, when _get would invent a value
        # The kind names its widget (nodes.kinds); a pack's kind with a name not in WIDGETS gets a line edit.
        WIDGETS.get(param.kind.widget, ParamEditor._line)(self, param, layout, size)
        if layout.count() == 0:
            layout.addWidget(self.editor)
        self.editor.setToolTip(param.help)
        self.set_value(value)

    # -- one builder per widget name (WIDGETS below): each sets editor, _get and _set -----------------

    def _prompt(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        box = PromptEdit()
        box.setMinimumHeight(110)
        box.setPlaceholderText(param.help or "Type here…")
        box.textChanged.connect(self._emit)
        box.tab_pressed.connect(self.tab_pressed)
        box.focus_lost.connect(self.session_ended)
        self.editor, self._get = box, box.toPlainText
        self._set = lambda v: box.set_text_keep_cursor(str(v or ""))

    def _int(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        spin = QSpinBox()
        spin.setRange(
            int(max(param.min if param.min is not None else -INT32, -INT32)),
            int(min(param.max if param.max is not None else INT32, INT32)),
        )
        spin.setSingleStep(int(self.multiple or param.step or 1))
        if param.zero_is_native_size:
            spin.setSpecialValueText(f"model size ({size.native})" if size else "model size")
        spin.setKeyboardTracking(False)
        spin.valueChanged.connect(self._emit)
        self.editor, self._get, self._set = spin, spin.value, lambda v: spin.setValue(int(v or 0))

    def _float(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        dspin = QDoubleSpinBox()
        dspin.setDecimals(4)
        dspin.setRange(
            param.min if param.min is not None else -1e9, param.max if param.max is not None else 1e9
        )
        dspin.setSingleStep(param.step or 0.1)
        dspin.setKeyboardTracking(False)
        dspin.valueChanged.connect(self._emit)
        # + 0.0: a typed -50 clamped to a minimum of 0 comes back as -0.0, which the node painted as "-0".
        self.editor, self._get = dspin, lambda: dspin.value() + 0.0
        self._set = lambda v: dspin.setValue(float(v or 0.0))

    def _bool(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        check = QCheckBox()
        check.toggled.connect(self._emit)
        self.editor, self._get, self._set = check, check.isChecked, lambda v: check.setChecked(bool(v))

    def _choice(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        combo = QComboBox()
        for choice in param.choices:
            combo.addItem(str(choice), choice)
        combo.currentIndexChanged.connect(self._emit)
        self.editor, self._get = combo, combo.currentData
        self._set = lambda v: combo.setCurrentIndex(max(0, combo.findData(v)))

    def _seed(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        line = QLineEdit()
        line.setValidator(QRegularExpressionValidator(r"\d{0,19}"))  # seeds are never negative
        low, high = int(param.min or 0), int(param.max) if param.max is not None else 2**63 - 1
        line.setToolTip(f"A whole number from {low} to {high} (digits only); Random picks one")
        line.editingFinished.connect(self._emit)
        # Plain text: an emoji die renders as an empty box where no emoji font is installed.
        dice = QPushButton("Random")
        dice.setObjectName("diceButton")
        dice.setToolTip("Pick a random seed")
        top = int(param.max) if param.max is not None else 2**32 - 1
        dice.clicked.connect(
            lambda: (line.setText(str(random.randint(int(param.min or 0), top))), self._emit())
        )
        layout.addWidget(line, 1)
        layout.addWidget(dice)
        self.editor, self._get = line, lambda: int(line.text() or 0)
        self._shown = lambda: int(line.text()) if line.text() else None
        self._set = lambda v: line.setText(str(v if v is not None else 0))

    def _line(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        line = QLineEdit()
        line.editingFinished.connect(self._emit)
        self.editor, self._get, self._set = line, line.text, lambda v: line.setText(str(v or ""))

    def _path(self, param: Param, layout: QHBoxLayout, size: ImageSize | None) -> None:
        self._line(param, layout, size)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        layout.addWidget(self.editor, 1)
        layout.addWidget(browse)
        if param.file_filter.startswith("Images"):
            paint = QPushButton("Mask…")
            paint.setToolTip("Paint the region to repaint (saved as the picture's alpha channel)")
            paint.clicked.connect(self._paint_mask)
            layout.addWidget(paint)

    def add_model_picker(self, choices: list[ModelChoice]) -> ModelCompleter:
        """A loader's weights field: type to filter the models library, or open the whole list (arrow)."""
        line = self.editor
        assert isinstance(line, QLineEdit)
        completer = ModelCompleter(choices, self)
        line.setCompleter(completer)
        line.setPlaceholderText("type to search the models library")
        completer.activated.connect(self._picked)
        arrow = QToolButton()
        arrow.setArrowType(Qt.ArrowType.DownArrow)
        arrow.setToolTip(
            f"Models from the library and built in ({len(choices)}); type in the field to filter"
        )
        arrow.clicked.connect(lambda: (line.setFocus(), completer.show_all()))
        self.layout().insertWidget(1, arrow)
        self.picker = completer
        return completer

    def _picked(self, value: str) -> None:
        self._set(value)
        self._emit()

    def _browse(self) -> None:
        current = str(self._get())
        if self.param.file_filter == "dir":
            path = QFileDialog.getExistingDirectory(self, f"Choose {self.param.name}", current)
        else:
            path, _ = QFileDialog.getOpenFileName(
                self, f"Choose {self.param.name}", current, self.param.file_filter or "All files (*)"
            )
        if path:
            self.set_value(path)
            self._emit()

    def _paint_mask(self) -> None:
        from app.gui.mask_painter import MaskPainterDialog
        from memory.paths import user_data_dir
        from pipelines.paths import NameEscapeError, builtin_image_path

        current = str(self._get())
        if not current:
            self._browse()
            current = str(self._get())
        shipped = current.startswith("builtin:")
        try:
            image = builtin_image_path(current) if shipped else Path(current)
        except NameEscapeError:  # builtin:../x names no shipped picture; the run says so
            return
        if not image.is_file():
            return
        # A shipped picture's mask goes to the user's data folder, never into the installed package.
        dialog = MaskPainterDialog(image, self, save_dir=user_data_dir() / "masks" if shipped else None)
        if dialog.exec() and dialog.saved_path is not None:
            self.set_value(str(dialog.saved_path))
            self._emit()

    def value(self) -> Any:
        return self._get()

    def set_value(self, value: Any) -> None:
        if value == self._value_or_none():
            return
        self._quiet = True
        try:
            self._set(value)
        finally:
            self._quiet = False

    def _value_or_none(self) -> Any:
        try:
            return (self._shown or self._get)()
        except (ValueError, AttributeError):
            return None

    def _emit(self, *_args: Any) -> None:
        if self._quiet:
            return
        value = self._get()
        if self.multiple and value % self.multiple:  # 70 with a multiple of 8 becomes 72, not a failed run
            value = max(self.multiple, round(value / self.multiple) * self.multiple)
            self._quiet = True
            try:
                self._set(value)
            finally:
                self._quiet = False
        self.changed.emit(value)


# A kind's `widget` name (nodes.kinds) -> the builder of its editor: the one place widgets are chosen.
WIDGETS: dict[str, Callable[[ParamEditor, Param, QHBoxLayout, ImageSize | None], None]] = {
    "prompt": ParamEditor._prompt,
    "int": ParamEditor._int,
    "float": ParamEditor._float,
    "bool": ParamEditor._bool,
    "choice": ParamEditor._choice,
    "seed": ParamEditor._seed,
    "line": ParamEditor._line,
    "path": ParamEditor._path,
}


class Inspector(QScrollArea):
    """The selected node's settings. `session` numbers typing sessions for the undo stack: it changes when
    the shown node changes or a prompt box loses focus, so each session is its own undo step (edits within
    one session merge while they come less than `commands.MERGE_WINDOW_S` apart)."""

    edited = Signal(str, str, object)  # node id, param name, value
    palette_requested = Signal()  # Tab in a text box
    seed_control_changed = Signal(str, str, str)  # node id, param name, "fixed" | "increment" | "randomize"

    def __init__(self, model: GraphModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.node_id: str | None = None
        self.session = 0
        self.editors: dict[str, ParamEditor] = {}
        # The picture size of the model feeding a node (the window reads it from the graph).
        self.size_hint: Callable[[str], ImageSize | None] = lambda _node_id: None
        # The models a loader's field may take (the window lists its models library).
        self.model_choices: Callable[[str, Param], list[ModelChoice]] | None = None
        self.info_label = QLabel()
        self.status_label = QLabel()
        self.setWidgetResizable(True)
        model.subscribe("param_changed", self.show_value)
        model.subscribe("connection_created", lambda c: self._refresh_if(c.in_node))
        model.subscribe("connection_removed", lambda c: self._refresh_if(c.in_node))
        model.subscribe("node_removed", lambda nid: self.show_node(None) if nid == self.node_id else None)
        model.subscribe("reset", lambda: self.show_node(None))
        self.show_node(None)

    def _refresh_if(self, node_id: str) -> None:
        if node_id == self.node_id:
            self.show_node(node_id)

    def end_session(self) -> None:
        self.session += 1

    def show_node(self, node_id: str | None, status: str = "", info: str = "") -> None:
        self.end_session()
        self.node_id = node_id
        self.editors = {}
        page = QWidget()
        outer = QVBoxLayout(page)
        outer.setContentsMargins(10, 10, 10, 10)
        if node_id is None or node_id not in self.model.node_ids():
            self.node_id = None
            hint = QLabel(
                "Select a node to edit its settings.\n\nTab or double-click the canvas to add a node; "
                "drag from a port to wire it."
            )
            hint.setObjectName("hint")
            hint.setWordWrap(True)
            outer.addWidget(hint)
            outer.addStretch(1)
            self.setWidget(page)
            return
        node, spec = self.model.node(node_id), self.model.spec(node_id)
        title = QLabel(
            f"<b style='font-size:12pt'>{spec.title if spec else node.type}</b>"
            f"  <span style='color:{theme.TEXT_DIM}'>{node_id}</span>"
        )
        outer.addWidget(title)
        if spec is not None and spec.description:
            desc = QLabel(spec.description)
            desc.setObjectName("hint")
            desc.setWordWrap(True)
            outer.addWidget(desc)
        self.info_label = QLabel()
        self.info_label.setObjectName("hint")
        self.info_label.setWordWrap(True)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status_label.setStyleSheet(f"color: {theme.ERROR};")
        outer.addWidget(self.info_label)
        outer.addWidget(self.status_label)
        self.set_facts(info, status)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        for param in spec.params if spec else ():
            link = node.inputs.get(param.name)
            if link is not None:
                label = QLabel(f"← from {link.node}.{link.output}")
                label.setObjectName("hint")
                form.addRow(param.name, label)
                continue
            size = self.size_hint(node_id) if param.zero_is_native_size else None
            editor = ParamEditor(param, node.params.get(param.name), size=size)
            if self.model_choices is not None and is_model_field(node.type, param):
                editor.add_model_picker(self.model_choices(node.type, param))
            editor.changed.connect(lambda value, name=param.name: self.edited.emit(node_id, name, value))
            editor.tab_pressed.connect(self.palette_requested)
            editor.session_ended.connect(self.end_session)
            if param.kind.widget == "seed":
                editor.layout().addWidget(self._seed_control(node_id, param.name))
            self.editors[param.name] = editor
            if param.kind.widget == "prompt":  # a prompt box takes the dock's whole width
                form.addRow(QLabel(param.name))
                form.addRow(editor)
            else:
                form.addRow(param.name, editor)
        outer.addLayout(form)
        outer.addStretch(1)
        self.setWidget(page)

    def _seed_control(self, node_id: str, name: str) -> QComboBox:
        """After each run: keep the seed, add one, or draw a new one (saved in the workflow's ui)."""
        combo = QComboBox()
        combo.setObjectName("seedControl")
        combo.setToolTip("What the seed does after each run (Run, or queueing another)")
        for mode in SEED_MODES:
            combo.addItem(mode, mode)
        ui = self.model.workflow.ui.get("nodes", {}).get(node_id, {})
        combo.setCurrentIndex(max(0, combo.findData((ui.get("seed_control") or {}).get(name, "fixed"))))
        combo.currentIndexChanged.connect(
            lambda _i: self.seed_control_changed.emit(node_id, name, combo.currentData())
        )
        return combo

    def set_facts(self, info: str, status: str) -> None:
        """Update the run facts and error line in place (typing in a widget is not interrupted)."""
        self.info_label.setText(info)
        self.info_label.setVisible(bool(info))
        self.status_label.setText(status)
        self.status_label.setVisible(bool(status))

    def show_value(self, node_id: str, name: str, value: Any) -> None:
        if node_id == self.node_id and name in self.editors:
            self.editors[name].set_value(value)
