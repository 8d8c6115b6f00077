"""The find bar: a small non-modal search field over the canvas's top right corner (Ctrl+F).

Lives here: `FindBar`. Imports Qt only; the window's `StaplesMixin` (app/gui/staples.py) does the finding.
Typing jumps to the first node whose title, id or type matches; Enter (or F3) goes to the next match,
Shift+Enter to the previous one; the bar counts them ("2 of 3"). Esc closes it and gives the canvas back the
keyboard.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QPoint, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget


class FindBar(QFrame):
    def __init__(
        self,
        parent: QWidget,
        search: Callable[[str], tuple[int, int]],
        step: Callable[[int], tuple[int, int]],
    ) -> None:
        """`search(text)`: jump to the first match, `step(+1 | -1)`: the next or previous one; both return
        (position from 1, matches), (0, 0) when nothing matches."""
        super().__init__(parent)
        self.setObjectName("findBar")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self._search, self._step = search, step
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 4, 4)
        self.field = QLineEdit()
        self.field.setPlaceholderText("Find node: title, id or type")
        self.field.setMinimumWidth(220)
        self.field.setClearButtonEnabled(True)
        self.count = QLabel()
        self.count.setObjectName("hint")
        self.count.setMinimumWidth(64)
        layout.addWidget(self.field, 1)
        layout.addWidget(self.count)
        for text, tip, slot in (
            ("↑", "Previous match (Shift+Enter)", lambda: self.go(-1)),
            ("↓", "Next match (Enter, F3)", lambda: self.go(1)),
            ("✕", "Close (Esc)", self.close_bar),
        ):
            button = QToolButton()
            button.setText(text)
            button.setToolTip(tip)
            button.setAutoRaise(True)
            button.clicked.connect(slot)
            layout.addWidget(button)
        self.field.textEdited.connect(self._typed)
        self.field.installEventFilter(self)
        self.hide()

    def open(self, text: str) -> None:
        """Show in the parent's top right corner with `text` selected, ready to type over."""
        self.adjustSize()
        parent = self.parentWidget()
        self.move(QPoint(max(0, parent.width() - self.width() - 12), 12))
        self.show()
        self.raise_()
        self.field.setText(text)
        self.field.selectAll()
        self.field.setFocus()

    def close_bar(self) -> None:
        self.hide()
        self.parentWidget().setFocus()

    def go(self, direction: int) -> None:
        if self.field.text().strip():
            self._show(*self._step(direction))

    def _typed(self, text: str) -> None:
        self._show(*self._search(text)) if text.strip() else self.count.setText("")

    def _show(self, position: int, total: int) -> None:
        self.count.setText(f"{position} of {total}" if total else "no match")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.field and isinstance(event, QKeyEvent):
            keys = (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Escape)
            if event.type() == QEvent.Type.ShortcutOverride and event.key() in keys:
                event.accept()  # ours, not the window's Esc (cancel the run) while the field has focus
                return True
            if event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Escape:
                self.close_bar()
                return True
            if event.type() == QEvent.Type.KeyPress and event.key() in keys:
                shift = event.modifiers() & Qt.KeyboardModifier.ShiftModifier
                self.go(-1 if shift else 1)
                return True
        return super().eventFilter(watched, event)
