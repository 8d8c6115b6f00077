"""After File > Import of a ComfyUI file: a dismissable summary over the canvas (mapped, approximated and what
differs, every missing model file with the folders searched and how to add a models folder) and the affected
nodes marked before Run (issue 32 item 3). The summary's lines are `app import`'s (`app.import_summary`).

Lives here: `ImportReport`, `comfy_report`, `ImportSummary` (the banner), `ImportMarksUi` (installed by the main
window with one call). Imports Qt, `app.import_summary`, `app.gui.node_item`, `nodes.comfy.sources`, `nodes.comfy.subgraph_fold`,
`nodes.model_names`, `nodes.subgraph`, `nodes.workflow`.

Marks: a node whose model file is missing gets the error badge ("✕ missing model") with the reason in its
tooltip; a node the importer approximated, or one with a note on what differs, gets an amber "≈ differs". They
stay until Run (which replaces them with the run's states); editing a marked node's file name takes its mark
away, since the name it complained about is gone.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gui.node_item import NodeRunState

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow
    from nodes.registry import NodeRegistry
    from pipelines.models_library import ModelsLibrary

SETTINGS_HINT = "in the editor: File > Settings > Models folder"


@dataclass
class ImportReport:
    source: str
    lines: list[str]  # what `app import` prints (app.import_summary.summary_lines)
    differs: dict[str, list[str]] = field(default_factory=dict)  # node -> notes on what differs
    missing: dict[str, str] = field(default_factory=dict)  # node -> the missing-model problem
    unsupported: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.differs or self.missing or self.unsupported)


def comfy_report(path: Path, registry: NodeRegistry, library: ModelsLibrary) -> ImportReport | None:
    """The report of importing `path`, or None when it is not a ComfyUI file (another importer opened it)."""
    from app.import_summary import summary_lines
    from nodes.comfy.api_format import ComfyFormatError
    from nodes.comfy.sources import import_comfy, read_comfy_data
    from nodes.comfy.subgraph_fold import fold_comfy_subgraphs
    from nodes.model_names import resolve_model_names
    from nodes.subgraph import expand_subgraphs
    from nodes.workflow import parse_workflow

    try:
        result = import_comfy(Path(path), registry)
    except (ComfyFormatError, OSError, ValueError):
        return None
    wf, _ = parse_workflow(result.workflow, registry, source=str(path))
    # Looked up even with no models folder set: the problem then says so, and the node is marked. Loaders
    # inside subgraphs too: with the subgraphs folded as the editor opens the file (app.importing) and then
    # expanded, they are named by path ("loader/load_checkpoint"), as a run names them.
    folded = fold_comfy_subgraphs(wf, read_comfy_data(Path(path)), registry)
    names = resolve_model_names(expand_subgraphs(folded), library, find=True)
    lines = summary_lines(result, names, library_set=bool(library))
    report = ImportReport(str(path), lines, unsupported=[str(u) for u in result.unsupported])
    for note in result.notes:
        if note.node is not None:
            report.differs.setdefault(note.node, []).append(note.message)
    for family in result.families:
        report.differs.setdefault(family.node, []).append(family.message)
    for problem in names:
        report.missing[problem.node] = f"{problem.field}: {problem.reason}"
    if report.missing:
        report.lines.append(f"missing models: {SETTINGS_HINT}")
    return report


class ImportSummary(QFrame):
    """The banner at the top of the canvas; Dismiss (or Esc on it) hides it, the marks stay."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("importSummary")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(
            "#importSummary { background: rgba(24, 24, 30, 235); border: 1px solid #5a5a70; border-radius: 6px; }"
        )
        self.title = QLabel("")
        self.title.setStyleSheet("font-weight: bold")
        self.body = QLabel("")
        self.body.setWordWrap(True)
        self.body.setTextFormat(Qt.TextFormat.RichText)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.settings_button = QPushButton("Models folder…")
        self.dismiss_button = QPushButton("Dismiss")
        self.dismiss_button.clicked.connect(self.hide)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.settings_button)
        buttons.addWidget(self.dismiss_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.body)
        layout.addLayout(buttons)
        self.hide()

    def show_report(self, report: ImportReport) -> None:
        from app.import_summary import is_approximated

        self.title.setText(f"Imported {Path(report.source).name}")
        items = [html.escape(line) for line in report.lines]
        items += [f"unsupported: {html.escape(u)}" for u in report.unsupported]
        items += [
            f"node {html.escape(node)}: {html.escape(note)}"
            for node, notes in report.differs.items()
            for note in notes
            if not is_approximated(note)  # an approximated note is already a summary line
        ]
        self.body.setText("<br>".join(f"• {i}" for i in items))
        self.settings_button.setVisible(bool(report.missing))
        self.place()
        self.show()
        self.raise_()

    def place(self) -> None:
        parent = self.parentWidget()
        width = min(720, max(360, parent.width() - 40))
        self.setFixedWidth(width)
        # The wrapped lines' height at this width (adjustSize alone spreads the labels over a taller frame).
        layout = self.layout()
        self.setFixedHeight(
            layout.heightForWidth(width) if layout.hasHeightForWidth() else self.sizeHint().height()
        )
        self.move(16, 12)


class ImportMarksUi(QObject):
    """Shows the report after an import, marks its nodes, and takes a mark away when its name is edited."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.banner = ImportSummary(window.view)
        self.banner.settings_button.clicked.connect(window.open_settings)
        self.report: ImportReport | None = None
        window.view.installEventFilter(self)
        window.model.subscribe("param_changed", self._param_changed)

    def eventFilter(self, watched: object, event: object) -> bool:  # noqa: N802 (Qt name)
        if watched is self.window.view and getattr(event, "type", lambda: None)() == QEvent.Type.Resize:
            if self.banner.isVisible():
                self.banner.place()
        return False

    def after_import(self, path: Path) -> None:
        w = self.window
        report = comfy_report(path, w.registry, w.library)
        self.report = report
        if report is None:
            self.banner.hide()
            return
        for node, notes in report.differs.items():
            if node in w.scene.node_items:
                w.scene.set_run_state(node, NodeRunState("warning", message="; ".join(notes)))
        for node, reason in report.missing.items():
            # A loader inside a subgraph ("loader/ckpt") marks its subgraph node (app/gui/subgraph_ops.py).
            if node in w.scene.node_items or w.subgraph_ops.shown_for(node) is not None:
                w.scene.set_run_state(node, NodeRunState("error", message=f"missing model: {reason}"))
        self.banner.show_report(report)
        if report.missing:
            w.status(f"Imported {path.name}: {len(report.missing)} model file(s) missing (see the summary)")

    def _param_changed(self, node_id: str, name: str, _value: object) -> None:
        report = self.report
        if (
            report is None
            or node_id not in report.missing
            or not report.missing[node_id].startswith(f"{name}:")
        ):
            return
        del report.missing[node_id]
        state = self.window.scene.run_states.get(node_id)
        if state is not None and state.status == "error":
            self.window.scene.set_run_state(node_id, NodeRunState())


def install(window: MainWindow) -> ImportMarksUi:
    return ImportMarksUi(window)
