"""A one-line label that never widens its panel: a long text is elided with "…" (whole in the tooltip).

Lives here: `ElidedLabel`. Imports Qt only.
A plain QLabel's minimum width is its text's width, so a long caption (a picture's file name, a queued
run's label with its seeds) made the dock it sits in grow wider with each run, and never shrink.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setToolTip(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt name)
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(20, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt name)
        return QSize(20, super().sizeHint().height())

    def shown_text(self) -> str:
        """The text as painted: elided to the label's width."""
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideMiddle, self.contentsRect().width()
        )

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        painter = QPainter(self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(
            self.contentsRect(), int(self.alignment()) | Qt.TextFlag.TextSingleLine, self.shown_text()
        )
