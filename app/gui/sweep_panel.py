"""Sweeps in the window: the Run menu's "Run sweep...", a Sweep tab in the Output dock, a worker thread.

Lives here: `SweepUi` (installed by the main window with one call), `SweepPanel`, `SweepController`. Imports
Qt, `app.batch` (Ray only through `app.batch.cluster`, when a cluster is chosen), `app.gui.sweep_dialog`,
`app.gui.output_panel`. The sweep runs on a plain thread with its own worker (executor + memory manager);
each finished job comes back as a queued Qt signal, so the list of jobs fills in as they end. The contact
sheet is shown in the Sweep tab and added to the Images tab when the sweep ends.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QImage
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMenu,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.output_panel import ImageView
from nodes.context import CancelToken
from nodes.sweep import SweepJob
from nodes.workflow import validate

if TYPE_CHECKING:
    from app.batch.execute import SweepPlan
    from app.batch.worker import JobResult, WorkerConfig
    from app.gui.main_window import MainWindow
    from app.gui.sweep_dialog import SweepChoice

# app.batch (and with it torch, through the worker) is imported when a sweep is opened, not with the window:
# the window opens before torch is imported (issue 29's start-up).

MARK = {"ok": "✓", "failed": "✗", "cancelled": "–", "skipped": "–"}


class SweepController(QObject):
    job_done = Signal(object)  # JobResult
    finished = Signal(object)  # the report dict
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cancel_token = CancelToken()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, choice: SweepChoice, config: WorkerConfig, out_dir: Path, registry: Any) -> None:
        self.cancel_token = CancelToken()
        cancel = self.cancel_token

        def work() -> None:
            from app.batch.execute import execute_sweep

            cluster = None
            try:
                if choice.cluster is not None:
                    from app.batch.cluster import connect

                    cluster = connect(choice.cluster, workers=choice.workers, threads=config.threads)
                report = execute_sweep(
                    choice.plan,
                    config,
                    out_dir,
                    registry=registry,
                    cluster=cluster,
                    cancel=cancel,
                    on_result=self.job_done.emit,
                )
                self.finished.emit(report)
            except Exception as exc:  # shown in the window; the GUI must survive any sweep failure
                self.failed.emit(f"{type(exc).__name__}: {exc}")
            finally:
                if cluster is not None:
                    cluster.close()

        self._thread = threading.Thread(target=work, name="nodeloom-sweep", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self.cancel_token.cancel()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class SweepPanel(QWidget):
    """Progress per job and the contact sheet."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status = QLabel("No sweep yet: Run → Run sweep...")
        self.progress = QProgressBar()
        self.jobs = QListWidget()
        self.sheet = ImageView()
        self.cancel_button = QPushButton("Cancel sweep")
        self.cancel_button.setEnabled(False)
        row = QHBoxLayout()
        row.addWidget(self.progress, 1)
        row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.status)
        layout.addLayout(row)
        layout.addWidget(self.jobs, 1)
        layout.addWidget(self.sheet, 2)
        self.rows: dict[int, int] = {}  # job index -> list row

    def begin(self, plan: SweepPlan, where: str) -> None:
        self.jobs.clear()
        self.rows.clear()
        for row, job in enumerate(plan.jobs):
            self.rows[job.index] = row
            self.jobs.addItem(f"·  job {job.index}  {job.label or '(no swept values)'}")
        self.progress.setRange(0, len(plan.jobs))
        self.progress.setValue(0)
        self.sheet.clear()
        self.status.setText(f"Sweep of {len(plan.jobs)} job(s) {where}...")
        self.cancel_button.setEnabled(True)

    def job_done(self, result: JobResult) -> None:
        text = f"{MARK.get(result.status, '?')}  job {result.index}  {SweepJob(result.index, result.values).label}"
        text += f"  {result.status} in {result.seconds:.2f} s"
        if result.worker:
            text += f"  ({result.worker})"
        if result.error and result.status == "failed":
            text += f"  {result.error.splitlines()[0]}"
        item = self.jobs.item(self.rows.get(result.index, 0))
        if item is not None:
            item.setText(text)
            item.setToolTip("\n".join(result.outputs) or (result.error or ""))
        self.progress.setValue(self.progress.value() + 1)

    def end(self, report: dict[str, Any]) -> None:
        from app.batch.report import summary_lines

        self.cancel_button.setEnabled(False)
        self.status.setText("\n".join(summary_lines(report)[:2]))
        png = report.get("contact_sheet", {}).get("png")
        if png:
            self.sheet.set_image(QImage(png))


class SweepUi:
    """What `install` adds to a main window: the menu action, the Sweep tab and the controller."""

    def __init__(self, window: MainWindow, menu: QMenu) -> None:
        self.window = window
        self.panel = SweepPanel()
        self.controller = SweepController(window)
        self.tab = window.output.addTab(self.panel, "Sweep")
        self.action = QAction("Run &Sweep...", window)
        self.action.setShortcut("Ctrl+Shift+Return")
        self.action.setStatusTip(
            "Run the graph once per value of one or more parameters (seeds, cfg, prompts)"
        )
        self.action.triggered.connect(self.open_dialog)
        menu.addAction(self.action)
        self.controller.job_done.connect(self.panel.job_done)
        self.controller.finished.connect(self._finished)
        self.controller.failed.connect(self._failed)
        self.panel.cancel_button.clicked.connect(self.controller.cancel)
        self.last_report: dict[str, Any] | None = None

    def open_dialog(self) -> None:
        from app.gui.sweep_dialog import SweepDialog

        wf = self.window.model.to_workflow()
        problems = validate(wf, self.window.registry)
        if problems:
            self.window.show_problems("Cannot sweep yet", problems, "Fix these before running:")
            return
        dialog = SweepDialog(wf, self.window.registry, self.window)
        if dialog.exec() == SweepDialog.DialogCode.Accepted and (choice := dialog.choice()) is not None:
            self.start(choice)

    def start(self, choice: SweepChoice) -> bool:
        from app.batch.worker import WorkerConfig

        if self.controller.running:
            self.window.status("A sweep is already running")
            return False
        settings = self.window.settings
        try:
            memory = settings.memory
        except ValueError as exc:  # a malformed budget stored by hand: say so, keep the editor alive
            self.window.status(f"Cannot start the sweep: {exc} (see Settings)")
            return False
        out_dir = settings.output_dir / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
        config = WorkerConfig(
            memory=memory,
            allow_pickle=settings.allow_pickle,
            # Local jobs write straight into the folder; Ray workers send their files back.
            out_dir=None if choice.cluster else str(out_dir),
        )
        where = "in this process" if choice.cluster is None else f"on Ray ({choice.cluster})"
        self.panel.begin(choice.plan, where)
        self.window.output.setCurrentWidget(self.panel)
        self.window.output.add_log(f"Sweep started: {len(choice.plan.jobs)} job(s) {where}, into {out_dir}")
        self.controller.start(choice, config, out_dir, self.window.registry)
        return True

    def _finished(self, report: dict[str, Any]) -> None:
        from app.batch.report import summary_lines

        self.last_report = report
        self.panel.end(report)
        for line in summary_lines(report):
            self.window.output.add_log(line)
        png = report.get("contact_sheet", {}).get("png")
        if png:
            self.window.output.add_file("sweep", png)
            self.window.output.setCurrentWidget(self.panel)
        self.window.status(summary_lines(report)[0])

    def _failed(self, message: str) -> None:
        self.panel.cancel_button.setEnabled(False)
        self.panel.status.setText(f"Sweep failed: {message}")
        self.window.output.add_log(f"Sweep failed: {message}")
        self.window.status("Sweep failed")


def install(window: MainWindow, menu: QMenu) -> SweepUi:
    return SweepUi(window, menu)
