"""The window's status bar: a message that never hides under the permanent widgets (progress, RSS label).

Lives here: `StatusBar`. Imports Qt only.
QStatusBar clips a long message where the first permanent widget starts; this one elides it with "…" and
keeps the whole message in the tooltip, so `currentMessage()` and `showMessage()` work as before.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QStatusBar, QStyle, QStyleOption, QWidget

MARGIN = 6


class StatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.permanent: list[QWidget] = []
        self.messageChanged.connect(self.setToolTip)  # the whole message, however narrow the window

    def addPermanentWidget(self, widget: QWidget, stretch: int = 0) -> None:  # noqa: N802 (Qt name)
        self.permanent.append(widget)
        super().addPermanentWidget(widget, stretch)

    def message_rect(self) -> QRect:
        """Where the message may go: from the left edge to the first visible permanent widget."""
        right = min((w.geometry().left() for w in self.permanent if w.isVisible()), default=self.width())
        return QRect(MARGIN, 0, max(0, right - 2 * MARGIN), self.height())

    def shown_text(self) -> str:
        """The message as painted: elided to fit `message_rect`."""
        return self.fontMetrics().elidedText(
            self.currentMessage(), Qt.TextElideMode.ElideRight, self.message_rect().width()
        )

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        if not self.currentMessage():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(
            self.message_rect(),
            Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextSingleLine,
            self.shown_text(),
        )
