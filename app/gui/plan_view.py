"""Will it fit? The memory plan in the editor, recomputed as the graph changes: a bar on each node (its
predicted device peak against the budget), a line in the status bar ("fits in 5.2 of 8.0 GiB (sequential)"
or what it needs) and a Plan dock with the per-node table (the same figures `app plan --json` prints).

Lives here: `PlanController` (debounce + worker thread), `PlanPanel` (the dock's table), `PlanUi` (installed by
the main window with one call), `plan_summary`, `paint_plan_bar`. Imports Qt, `memory.config`,
`memory.errors`; `nodes.plan` (torch) and `memory` only on the worker thread, so opening the window stays cheap.

The plan runs `nodes.plan.make_plan` on a plain thread with a memory manager of its own (the settings' device,
budgets and policy; closed after each plan), never the run's: the loader nodes it runs register models in that
manager, and the run's ledger is left alone. Edits within `DEBOUNCE_MS` of each other make one plan; an edit
while a plan is computing makes one more after it; a result older than the graph on screen is dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QPainter
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.gui import theme
from memory.config import MemoryConfig
from memory.errors import fmt_bytes

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow
    from app.gui.node_item import NodeItem
    from nodes.plan import MemoryPlan
    from nodes.registry import NodeRegistry
    from nodes.workflow import Workflow

DEBOUNCE_MS = 600  # a burst of typing in a size box makes one plan, not one per key
GIB = 1024**3
MIB = 1024**2
BAR_H = 4.0  # the plan bar along a node's bottom edge
COLUMNS = ("Node", "Type", "Device peak", "Host peak (RSS)", "Resident", "Working", "Moves", "Note")

PlanFn = Callable[["Workflow", "NodeRegistry", MemoryConfig, Path], "MemoryPlan"]


def compute_plan(wf: Workflow, registry: NodeRegistry, config: MemoryConfig, out_dir: Path) -> MemoryPlan:
    """`app plan`'s computation on a memory manager of its own (worker thread: imports torch on first use)."""
    from memory import MemoryManager
    from nodes.plan import make_plan

    with MemoryManager(config) as memory:
        return make_plan(wf, registry, memory, out_dir)


def _pair(a: int, b: int) -> tuple[str, str, str]:
    """Two sizes in one unit, chosen by the larger: ("5.2", "8.0", "GiB"), or MiB below 1 GiB (a 10 MiB
    budget must not read "0.0 GiB")."""
    if max(a, b) >= GIB:
        return f"{a / GIB:.1f}", f"{b / GIB:.1f}", "GiB"
    return f"{a / MIB:.0f}", f"{b / MIB:.0f}", "MiB"


def plan_summary(plan: MemoryPlan) -> str:
    """The status bar's line: "fits in 5.2 of 8.0 GiB (sequential)" or what the graph needs."""
    peak = plan.predicted_peak["device"]
    if plan.fits:
        used, budget, unit = _pair(peak, plan.budget)
        return f"Plan: fits in {used} of {budget} {unit} ({plan.policy})"
    needs = [(row["least_budget"], name) for name, row in plan.policies.items() if row.get("least_budget")]
    if not needs:
        return f"Plan: does not fit {fmt_bytes(plan.budget)} under any policy ({plan.problem})"
    least, name = min(needs)
    own = plan.policies.get(plan.policy, {}).get("least_budget")
    text = f"Plan: does not fit {fmt_bytes(plan.budget)} ({plan.policy}"
    text += f" needs {fmt_bytes(own)})" if own else ")"
    if name != plan.policy:
        text += f"; {name} needs {fmt_bytes(least)}"
    return text


def bar_color(peak: int, budget: int) -> QColor:
    """Green well inside the budget, amber near it, red over it."""
    frac = peak / budget if budget > 0 else 1.0
    return QColor(theme.DONE if frac <= 0.8 else theme.WARNING if frac <= 1.0 else theme.ERROR)


def paint_plan_bar(painter: QPainter, item: NodeItem) -> None:
    """The node's predicted device peak as a bar along its bottom edge, its length the share of the budget."""
    if item.plan is None:
        return
    peak, budget = item.plan
    rect = item.rect()
    frac = min(1.0, peak / budget) if budget > 0 else 1.0
    track = QRectF(8, rect.bottom() - BAR_H - 3, rect.width() - 16, BAR_H)
    painter.fillRect(track, QColor(255, 255, 255, 28))
    if peak > 0:  # at least a sliver: a node that loads 100 MiB of a 24 GiB budget still shows one
        painter.fillRect(
            QRectF(track.left(), track.top(), max(2.0, track.width() * frac), BAR_H), bar_color(peak, budget)
        )


def plan_tooltip(peak: int, budget: int) -> str:
    share = f" ({100 * peak / budget:.0f}%)" if budget > 0 else ""
    return f"Plan: device peak {fmt_bytes(peak)} of the {fmt_bytes(budget)} budget{share}"


class PlanController(QObject):
    """Debounces requests and computes plans on a worker thread; results come back as queued signals."""

    plan_ready = Signal(object)  # MemoryPlan, for the graph as it is now
    plan_failed = Signal(str)  # why there is no plan (the graph cannot run yet, or the plan failed)
    _done = Signal(int, object, str)  # generation, plan or None, error (worker -> GUI thread)

    def __init__(
        self, snapshot: Callable[[], Any], compute: PlanFn = compute_plan, parent: QObject | None = None
    ) -> None:
        """`snapshot()` returns (workflow, registry, config, out_dir) for the graph now, or a str saying why
        it cannot be planned (the graph is not runnable yet)."""
        super().__init__(parent)
        self.snapshot, self.compute = snapshot, compute
        # While it says True (a run in progress, torch still loading) the plan waits: it would only take CPU
        # from the run, and the run's end asks for a plan anyway (learned peaks).
        self.hold: Callable[[], bool] = lambda: False
        self.generation = 0  # bumped by each request: a plan of an older graph is dropped
        self.computed = 0  # plans computed (tests count them to check the debounce)
        self.last_thread = ""  # the thread the last plan ran on (tests check it is not the GUI's)
        self._thread: threading.Thread | None = None
        self._closed = False  # set by shutdown: a plan that ends after it reports nothing
        self._pending = False
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self._start)
        self._done.connect(self._finish, Qt.ConnectionType.QueuedConnection)

    @property
    def busy(self) -> bool:
        return (
            self.timer.isActive() or self._pending or (self._thread is not None and self._thread.is_alive())
        )

    def request(self) -> None:
        self.generation += 1
        self.timer.start()

    def _start(self) -> None:
        if self.hold():
            self.timer.start()  # ask again after another debounce interval
            return
        if self._thread is not None and self._thread.is_alive():
            self._pending = True  # one more when this one ends
            return
        self._pending = False
        snap = self.snapshot()
        if isinstance(snap, str):
            self.plan_failed.emit(snap)
            return
        generation = self.generation

        def work() -> None:
            self.last_thread = threading.current_thread().name
            try:
                plan, error = self.compute(*snap), ""
            except Exception as exc:  # a plan that fails says why in the status bar; editing goes on
                plan, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
            if self._closed:
                return
            try:
                self._done.emit(generation, plan, error)
            except RuntimeError:  # the window closed while this plan ran (shutdown's wait timed out)
                pass

        self._thread = threading.Thread(target=work, name="nodeloom-plan", daemon=True)
        self._thread.start()

    def _finish(self, generation: int, plan: object, error: str) -> None:
        self.computed += 1
        if self._pending:
            self._start()
            return
        if generation != self.generation:
            return  # the graph changed since; its own plan is on the way (the debounce timer runs)
        if plan is None:
            self.plan_failed.emit(error)
        else:
            self.plan_ready.emit(plan)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop asking and wait for a plan in flight (it closes its own memory manager)."""
        self._closed = True
        self.timer.stop()
        self._pending = False
        if self._thread is not None:
            self._thread.join(timeout)


class PlanPanel(QWidget):
    """The Plan dock: the verdict, then one row per node in run order."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel("The plan appears once the graph can run.")
        self.summary.setWordWrap(True)
        self.why = QLabel("")
        self.why.setObjectName("hint")
        self.why.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("planTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.summary)
        layout.addWidget(self.why)
        layout.addWidget(self.table, 1)

    def show_plan(self, plan: MemoryPlan) -> None:
        line = plan_summary(plan).removeprefix("Plan: ")
        self.summary.setText(line[:1].upper() + line[1:])
        peak = plan.predicted_peak
        self.why.setText(
            f"device {plan.device}, budget {fmt_bytes(plan.budget)}; predicted peak: device "
            f"{fmt_bytes(peak['device'])}, process RSS {fmt_bytes(peak['host'])}"
            + (f"; {plan.why}" if plan.requested == "auto" and plan.why else "")
            + (f"; each policy needs: {plan.need_text()}" if not plan.fits else "")
        )
        self.table.setRowCount(len(plan.nodes))
        for row, n in enumerate(plan.nodes):
            moves = "; ".join(
                f"{verb} {', '.join(items)}"
                for verb, items in (("load", n.loads), ("unload", n.unloads), ("stream", n.streams))
                if items
            )
            cells = (
                n.node_id,
                n.node_type,
                fmt_bytes(n.device_peak),
                fmt_bytes(n.host_peak),
                # One model a line: three resident models side by side pushed the Note column off the dock.
                "\n".join(f"{k} {fmt_bytes(v)}" for k, v in n.resident.items()),
                "\n".join(f"{w['component']} {fmt_bytes(w['bytes'])} ({w['source']})" for w in n.working),
                moves,
                n.note,
            )
            for col, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setToolTip(text)  # a cut note or a long model list reads in full
                if col in (2, 3):
                    cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, cell)
        self.table.resizeRowsToContents()

    def show_reason(self, reason: str) -> None:
        self.summary.setText(f"No plan: {reason}")
        self.why.setText("")
        self.table.setRowCount(0)


class PlanUi:
    """Wires the plan into the window: model events -> debounced plan -> node bars, status label, dock."""

    def __init__(self, window: MainWindow, compute: PlanFn = compute_plan) -> None:
        self.window = window
        self.panel = PlanPanel()
        self.label = QLabel("")
        self.label.setObjectName("planLabel")
        self.controller = PlanController(self._snapshot, compute, window)
        self.controller.plan_ready.connect(self._show)
        self.controller.plan_failed.connect(self._no_plan)
        self.controller.hold = lambda: (
            window.runner.running or window.remote_running() or not window.warmup.ready
        )
        self.last: MemoryPlan | None = None
        self.dock = QDockWidget("Plan", window)
        self.dock.setObjectName("plan")
        self.dock.setWidget(self.panel)
        window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.dock)
        window.tabifyDockWidget(window.plots_dock, self.dock)
        window.plots_dock.raise_()
        window.statusBar().addPermanentWidget(self.label)
        self.action = QAction("Live memory &plan", window)
        self.action.setCheckable(True)
        self.action.setChecked(window.settings.live_plan)
        self.action.setToolTip(
            "Recompute the memory plan as the graph changes (node bars, status bar, Plan dock)"
        )
        self.action.toggled.connect(self._toggled)
        window.view_menu.addAction(self.dock.toggleViewAction())
        window.view_menu.addAction(self.action)
        for event in (
            "param_changed",
            "connection_created",
            "connection_removed",
            "node_created",
            "node_removed",
            "reset",
        ):
            window.model.subscribe(event, lambda *_a: self.request())
        window.model.subscribe("node_ui_changed", lambda _nid, key: key == "mode" and self.request())
        # After a run the learned peaks replace formulas: the next plan uses them.
        window.runner.run_finished.connect(lambda _result: self.request())

    @property
    def enabled(self) -> bool:
        return self.action.isChecked()

    def request(self) -> None:
        """The graph, the settings or the models changed: plan again (debounced)."""
        if self.enabled:
            self.controller.request()

    def _toggled(self, on: bool) -> None:
        self.window.settings.set_live_plan(on)
        if on:
            self.request()
        else:
            self.controller.timer.stop()
            self._clear_bars()
            self.label.setText("")

    def _snapshot(self) -> Any:
        from nodes.model_names import resolve_model_names
        from nodes.modes import prepare_run

        w = self.window
        prepared = prepare_run(w.model.to_workflow(), w.registry)
        wf = prepared.workflow
        if not wf.nodes:
            return "the graph is empty"
        problems = prepared.problems or resolve_model_names(wf, w.library)
        if problems:
            first = problems[0]
            return (
                f"{first.node}.{first.field}: {first.reason}"
                if first.field
                else f"{first.node}: {first.reason}"
            )
        try:
            config = w.settings.memory
        except ValueError as exc:
            return f"settings: {exc}"
        return wf, w.registry, config, w.settings.output_dir

    def _clear_bars(self) -> None:
        for item in self.window.scene.node_items.values():
            if getattr(item, "plan", None) is not None:
                item.plan = None
                item.update()

    def _show(self, plan: MemoryPlan) -> None:
        self.last = plan
        self.panel.show_plan(plan)
        text = plan_summary(plan)
        self.label.setText(text)
        self.label.setToolTip(self.panel.why.text())
        self.label.setStyleSheet("" if plan.fits else f"color: {theme.ERROR}")
        self._clear_bars()
        items = self.window.scene.node_items
        peaks: dict[str, int] = {}
        for n in plan.nodes:
            # A node inside a subgraph ("prompts/positive") shows on its subgraph node: the highest inner peak.
            shown = n.node_id if n.node_id in items else self.window.subgraph_ops.shown_for(n.node_id)
            if shown is not None:
                peaks[shown] = max(peaks.get(shown, 0), n.device_peak)
        for node_id, peak in peaks.items():
            item = items[node_id]
            if hasattr(item, "plan"):
                item.plan = (peak, plan.budget)
                item.refresh_tooltip()
                item.update()

    def _no_plan(self, reason: str) -> None:
        self.last = None
        self.panel.show_reason(reason)
        self.label.setText("Plan: —")
        self.label.setToolTip(f"No memory plan: {reason}")
        self.label.setStyleSheet("")
        self._clear_bars()


def install(window: MainWindow, compute: PlanFn = compute_plan) -> PlanUi:
    return PlanUi(window, compute)
