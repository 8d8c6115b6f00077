"""Live plots (pyqtgraph): device and host memory over time with model load/unload markers and the budget
line; step timings (seconds per sampler step, ms per decoded token, time to first token); a per-node
timeline of the last run (load, compute, unload bars).

Lives here: `PlotsPanel`. Imports Qt, pyqtgraph, `memory.telemetry` records, `nodes.events`, and
`app.gui.plot_labels` (where the load/unload labels go).
Records are appended as they are drained from the queue; a 10 Hz timer redraws only what changed, with at
most `MAX_POINTS` samples per curve (FINDINGS: repaint cost grows with points).
The plot widgets are built on the panel's first show (or first redraw): a closed dock never pays for them.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics, QShowEvent
from PySide6.QtWidgets import QSizePolicy, QSplitter, QTabWidget, QWidget

from app.gui import theme
from app.gui.plot_labels import LABEL_SPOTS, layout_labels
from app.gui.run_worker import TimedEvent
from memory.telemetry import LoadEvent, NodePeak, Sample, StepEvent, UnloadEvent
from nodes.events import NodeCached, NodeFailed, NodeFinished, NodeStarted, RunFinished, RunStarted

MAX_POINTS = 6000
MAX_MARKERS = 40
MIB = 1024 * 1024
REDRAW_MS = 100
MAX_REDRAW_MS = 1000  # at least one redraw a second while the plots are shown
# redraw() sets data; pyqtgraph paints afterwards, and a profile of a first run measured the paint (mostly the
# axes) at ~5x redraw() itself: spacing redraws 100x their own time keeps plotting near 5% of a core.
REDRAW_SHARE = 100
RUNS_SHOWN = 3
TIMELINE_AXIS_MAX = 150  # px for node names left of the timeline; longer ids are elided in the middle


def fmt_size(nbytes: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}" if nbytes < 10 * size else f"{nbytes / size:.0f} {unit}"
    return f"{nbytes} B"


@dataclass
class NodeSpan:
    node_id: str
    start: float
    end: float | None = None
    status: str = "running"
    loads: list[tuple[float, float, str]] = field(default_factory=list)  # start, end, component
    unloads: list[tuple[float, float, str]] = field(default_factory=list)


def _plot(
    title: str, left: str, legend_offset: tuple[int, int] = (-8, 6), legend_outside: bool = False
) -> pg.PlotWidget:
    # No view-box context menu: built here it took ~a third of the widget's construction (two axis-option
    # forms each), only for setMenuEnabled(False) below to throw it away.
    widget = pg.PlotWidget(background=theme.CANVAS, enableMenu=False)
    widget.setTitle(title, color=theme.TEXT, size="10pt")
    widget.setLabel("left", left, color=theme.TEXT_DIM)
    widget.setLabel("bottom", "seconds", color=theme.TEXT_DIM)
    widget.showGrid(x=True, y=True, alpha=0.15)
    style = {"labelTextColor": theme.TEXT, "brush": pg.mkBrush(30, 31, 34, 200)}
    if legend_outside:  # a column right of the plot area; curves made with name= still join it
        item = widget.getPlotItem()
        item.legend = pg.LegendItem(**style)
        # Its own size, not the plot's height: a stretched legend spreads its rows apart.
        item.legend.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        item.layout.addItem(item.legend, 2, 3, Qt.AlignmentFlag.AlignTop)
    else:
        widget.addLegend(offset=legend_offset, **style)
    widget.setMenuEnabled(False)
    for side in ("left", "bottom"):
        widget.getAxis(side).enableAutoSIPrefix(False)
    return widget


class PlotsPanel(QSplitter):
    """Memory on the left (always visible); step timings and the timeline in tabs on the right."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.t: deque[float] = deque(maxlen=MAX_POINTS)
        self.allocated: deque[float] = deque(maxlen=MAX_POINTS)
        self.reserved: deque[float] = deque(maxlen=MAX_POINTS)
        self.rss: deque[float] = deque(maxlen=MAX_POINTS)
        self.budget: deque[float] = deque(maxlen=MAX_POINTS)
        self.sample_count = 0
        self.steps: dict[str, list[tuple[int, float]]] = {}
        self.ttft: list[tuple[int, float]] = []
        self.spans: dict[str, NodeSpan] = {}
        self.run_order: list[str] = []
        self.peaks: dict[str, tuple[int, int]] = {}  # node id -> (peak, baseline) bytes, last run
        self._markers: deque[Any] = deque()
        # Where each run began on the memory plot's time axis: the x-axis shows the last RUNS_SHOWN runs.
        self._run_starts: deque[float | None] = deque(maxlen=RUNS_SHOWN)
        self._label_text: dict[Any, str] = {}  # marker line -> its label, before any "(+N)"
        self._label_layout_key: tuple[Any, ...] = ()
        self._dirty: set[str] = set()
        self._step_index = 0
        self._first_step: dict[str, int] = {}  # node id -> index of its first step (TTFT goes there)
        self._largest: tuple[str, int] | None = None  # the largest model loaded in this series: name, bytes
        self.timeline_bars: list[Any] = []  # drawn on the timeline plot
        self._pending_marks: deque[LoadEvent | UnloadEvent] = deque(maxlen=MAX_MARKERS)  # before build()
        self.built = False
        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def build(self) -> None:
        """The plot widgets, made on first show (or first redraw): the records are kept from the start, but the
        three pyqtgraph plots took ~0.3 s of a window's ~1 s construction, which a closed dock never needs."""
        if self.built:
            return
        self.built = True
        pg.setConfigOptions(antialias=True)
        self.tabs = QTabWidget()
        # The legend sits right of the plot area, in the plot's own layout: inside it (top right) it covered
        # the newest RSS samples and the load labels hanging from the top.
        self.memory_plot = _plot("Memory", "MiB", legend_outside=True)
        self.memory_plot.setToolTip(
            "Orange bands: a model loading (+name size); grey: unloading (−name size).\n"
            "Dashed red: the memory budget."
        )
        self.curve_alloc = self.memory_plot.plot(name="device allocated", pen=pg.mkPen("#4e9bff", width=2))
        self.curve_reserved = self.memory_plot.plot(
            name="device reserved", pen=pg.mkPen("#90caf9", width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
        )
        self.curve_rss = self.memory_plot.plot(name="host RSS", pen=pg.mkPen("#66bb6a", width=2))
        # The budget line does not drive the y range: a 20 GiB host budget would flatten a 600 MiB curve.
        self.curve_budget = pg.PlotDataItem(
            name="budget", pen=pg.mkPen(theme.ERROR, width=1.5, style=pg.QtCore.Qt.PenStyle.DashLine)
        )
        self.memory_plot.getPlotItem().addItem(self.curve_budget, ignoreBounds=True)
        # At the line's left end: load/unload labels gather where the models load, later in a run.
        self.budget_label = pg.TextItem("", color=theme.ERROR, anchor=(0, 1))
        self.budget_label.setVisible(False)
        self.memory_plot.getPlotItem().addItem(self.budget_label, ignoreBounds=True)
        self.addWidget(self.memory_plot)
        self.addWidget(self.tabs)
        self.setStretchFactor(0, 3)
        self.setStretchFactor(1, 2)

        self.steps_plot = _plot("Step timings", "ms", legend_offset=(8, 6))
        self.steps_plot.setLabel("bottom", "step (this run)", color=theme.TEXT_DIM)
        self.curve_sampler = self.steps_plot.plot(
            name="sampler step",
            pen=pg.mkPen("#b39ddb", width=2),
            symbol="o",
            symbolSize=5,
            symbolBrush="#b39ddb",
        )
        self.curve_decode = self.steps_plot.plot(
            name="decode token",
            pen=pg.mkPen("#4db6ac", width=2),
            symbol="t",
            symbolSize=5,
            symbolBrush="#4db6ac",
        )
        self.curve_ttft = self.steps_plot.plot(
            name="prefill (TTFT)", pen=None, symbol="star", symbolSize=14, symbolBrush="#ffd54f"
        )
        self.tabs.addTab(self.steps_plot, "Steps")

        self.timeline_plot = _plot("Last run: per-node timeline", "")
        self.timeline_plot.getPlotItem().legend.setVisible(False)
        self.timeline_plot.invertY(True)
        self.tabs.addTab(self.timeline_plot, "Timeline")

        while self._pending_marks:
            self._add_marker(self._pending_marks.popleft())
        # Everything recorded so far is drawn; the first redraw drops legend entries for series without data.
        self._dirty.update({"memory", "steps", "timeline", "labels"})

    def showEvent(self, event: QShowEvent) -> None:
        self.build()
        super().showEvent(event)

    # -- input ------------------------------------------------------------------------------------

    def add_records(self, records: list[Any]) -> None:
        for record in records:
            if isinstance(record, Sample):
                if self.t and record.t < self.t[-1]:
                    # Time went back: a new memory manager's clock (Settings changed; each starts at 0). Joining
                    # its samples to the old ones drew a second, flat line back across the plot.
                    self.new_series()
                self.sample_count += 1
                self.t.append(record.t)
                self.allocated.append(record.device_allocated / MIB)
                self.reserved.append(record.device_reserved / MIB)
                self.rss.append(record.host_rss / MIB)
                self.budget.append(record.budget / MIB)
                self._dirty.add("memory")
            elif isinstance(record, (LoadEvent, UnloadEvent)):
                if isinstance(record, LoadEvent) and (
                    self._largest is None or record.nbytes > self._largest[1]
                ):
                    self._largest = (record.component.rsplit("/", 1)[-1], record.nbytes)
                    self._dirty.add("memory")
                self._add_marker(record)
                self._attach_to_span(record)
            elif isinstance(record, StepEvent):
                self._step_index += 1
                if record.kind == "prefill":
                    self.ttft.append((self._step_index, record.seconds * 1000))
                else:
                    self.steps.setdefault(record.kind, []).append((self._step_index, record.seconds * 1000))
                    self._first_step.setdefault(record.node_id, self._step_index)
                self._dirty.add("steps")
            elif isinstance(record, NodePeak):
                self.peaks[record.node_id] = (record.peak_bytes, record.baseline_bytes)

    def new_series(self) -> None:
        """A new memory manager (device, budget or policy changed): its samples are not the old series'
        continuation, so start the memory plot afresh instead of joining them with a diagonal."""
        for series in (self.t, self.allocated, self.reserved, self.rss, self.budget):
            series.clear()
        self._pending_marks.clear()
        while self._markers:
            self.memory_plot.removeItem(self._markers.popleft())
        self._label_text.clear()
        self._run_starts.clear()
        self._largest = None
        self._dirty.add("memory")

    def new_run(self) -> None:
        """Forget the last run's steps and timeline (called before the worker starts, so no record is lost)."""
        self._run_starts.append(self.t[-1] if self.t else None)
        self.spans.clear()
        self.run_order = []
        self.steps.clear()
        self.ttft.clear()
        self._step_index = 0
        self._first_step.clear()
        self._dirty.update({"steps", "timeline"})

    def add_run_event(self, timed: TimedEvent) -> None:
        event, t = timed.event, timed.t
        if isinstance(event, RunStarted):
            self.run_order = list(event.node_ids)
        elif isinstance(event, NodeStarted):
            self.spans[event.node_id] = NodeSpan(event.node_id, t)
        elif isinstance(event, NodeCached):
            self.spans[event.node_id] = NodeSpan(event.node_id, t, t, "cached")
        elif isinstance(event, (NodeFinished, NodeFailed)):
            span = self.spans.setdefault(event.node_id, NodeSpan(event.node_id, t - event.seconds))
            span.end = t
            span.status = "done" if isinstance(event, NodeFinished) else "error"
            ttft = event.metrics.get("ttft_s") if isinstance(event, NodeFinished) else None
            if ttft is not None:  # LLM nodes report time to first token as a metric
                self.ttft.append((self._first_step.get(event.node_id, self._step_index), ttft * 1000))
                self._dirty.add("steps")
        elif isinstance(event, RunFinished):
            # A cancelled node sends no finish of its own: its span ends where the run did, not where the
            # last finished node did (a 9 s LLM decode cancelled showed as 0.01 s).
            for span in self.spans.values():
                if span.end is None:
                    span.end = t
                    span.status = "cancelled" if event.cancelled else "error"
        else:
            return
        self._dirty.add("timeline")

    def _attach_to_span(self, record: LoadEvent | UnloadEvent) -> None:
        running = [s for s in self.spans.values() if s.end is None]
        if running:
            entry = (record.t - record.seconds, record.t, record.component)
            (running[-1].loads if isinstance(record, LoadEvent) else running[-1].unloads).append(entry)
            self._dirty.add("timeline")

    def _add_marker(self, record: LoadEvent | UnloadEvent) -> None:
        if not self.built:
            self._pending_marks.append(record)
            return
        load = isinstance(record, LoadEvent)
        color = "#ffa726" if load else "#8d99ae"
        name = record.component.rsplit("/", 1)[-1]
        # + load, − unload; two short lines run half as far up the line as one long one.
        label = f"{'+' if load else '−'}{name}\n{fmt_size(record.nbytes)}"
        band = pg.LinearRegionItem(
            (record.t - record.seconds, record.t),
            movable=False,
            brush=pg.mkBrush(color + "40"),
            pen=pg.mkPen(color + "00"),
        )
        line = pg.InfiniteLine(
            record.t,
            angle=90,
            pen=pg.mkPen(color, width=1),
            label=label,
            labelOpts={"position": LABEL_SPOTS[0][0], "color": color, "rotateAxis": (1, 0)},
        )
        line.setToolTip(label)
        self._label_text[line] = label
        for item in (band, line):
            self.memory_plot.addItem(item)
            self._markers.append(item)
        while len(self._markers) > 2 * MAX_MARKERS:
            old = self._markers.popleft()
            self._label_text.pop(old, None)
            self.memory_plot.removeItem(old)
        self._dirty.add("labels")

    # -- drawing ----------------------------------------------------------------------------------

    def _tick(self) -> None:
        """The redraw timer: nothing while the plots are hidden; otherwise redraw, and space redraws so that
        they and their paint take about 5% of the GUI thread. Measured (issue 29's start-up): at a fixed 10 Hz,
        redrawing took 4.4 s of CPU during a 28 s first run on a busy 2-core machine, CPU the run's imports
        and steps needed (same interpreter lock)."""
        if not self._dirty or not self.isVisible():
            return
        started = time.perf_counter()
        self.redraw()
        spent_ms = (time.perf_counter() - started) * 1000
        self.timer.setInterval(int(min(MAX_REDRAW_MS, max(REDRAW_MS, spent_ms * REDRAW_SHARE))))

    def redraw(self) -> None:
        self.build()
        if "memory" in self._dirty:
            t = list(self.t)
            self.curve_alloc.setData(t, list(self.allocated))
            self.curve_reserved.setData(t, list(self.reserved))
            self.curve_rss.setData(t, list(self.rss))
            self.curve_budget.setData(t, list(self.budget))
            # On a CPU the device is host memory: one curve says it all.
            cpu = bool(self.rss) and list(self.allocated)[-20:] == list(self.rss)[-20:]
            starts = [s for s in self._run_starts if s is not None]
            if t and starts:  # follow the last runs instead of growing over the whole session
                self.memory_plot.setXRange(starts[0], max(t[-1], starts[0] + 1.0), padding=0.02)
            if cpu and self.curve_alloc.isVisible():
                legend = self.memory_plot.getPlotItem().legend
                for curve in (self.curve_alloc, self.curve_reserved):
                    curve.setVisible(False)
                    legend.removeItem(curve)
            if self.budget:
                budget = self.budget[-1]
                peak = max(max(self.rss, default=0), max(self.reserved, default=0), 1.0)
                # The data always stays in view: a 10 MiB budget must not push a 720 MiB curve off the top.
                top = max(budget, peak) if budget < 3 * peak else peak
                self.memory_plot.setYRange(0, top * 1.6, padding=0)  # headroom for the legend at the top
                device = " (CPU)" if cpu else f", {self.allocated[-1]:,.0f} MiB device"
                self.memory_plot.setTitle(
                    f"Memory · {self.rss[-1]:,.0f} MiB host{device} · budget {fmt_size(int(budget * MIB))}"
                    + ("" if budget < 3 * peak else " (off scale)")
                    + self._budget_warning(budget),
                    color=theme.TEXT,
                    size="10pt",
                )
                self._label_budget(budget, t, budget < 3 * peak)
        # Labels are laid out on screen: again when markers change, the view moves or the plot is resized.
        view = self.memory_plot.getPlotItem().getViewBox()
        legend = self.memory_plot.getPlotItem().legend.boundingRect().size().toTuple()  # shrinks on a CPU
        key = (len(self._label_text), tuple(map(tuple, view.viewRange())), view.size().toTuple(), legend)
        if self._label_text and ("labels" in self._dirty or key != self._label_layout_key):
            self._label_layout_key = key
            layout_labels(self.memory_plot.getPlotItem(), self._label_text)
        if "steps" in self._dirty:
            for kind, curve in (("sampler_step", self.curve_sampler), ("decode_token", self.curve_decode)):
                points = self.steps.get(kind, []) + (
                    [] if kind != "sampler_step" else self.steps.get("step", [])
                )
                curve.setData([p[0] for p in points], [p[1] for p in points])
                self._in_legend(curve, bool(points))
            self.curve_ttft.setData([p[0] for p in self.ttft], [p[1] for p in self.ttft])
            self._in_legend(self.curve_ttft, bool(self.ttft))
            highest = max((p[1] for points in self.steps.values() for p in points), default=0.0)
            highest = max([highest] + [p[1] for p in self.ttft])
            if highest > 0:
                self.steps_plot.setYRange(0, highest * 1.5, padding=0)  # headroom for the legend
            xs = [p[0] for points in self.steps.values() for p in points] + [p[0] for p in self.ttft]
            if xs:  # auto-range around one point spans -5..10: keep a step either side, never below 0
                pad = max(1.0, 0.05 * (max(xs) - min(xs)))
                self.steps_plot.setXRange(max(0.0, min(xs) - pad), max(xs) + pad, padding=0)
            legend = self.steps_plot.getPlotItem().legend
            legend.setVisible(bool(legend.items))  # an empty legend is a bare square
        if "timeline" in self._dirty:
            self._draw_timeline()
        self._dirty.clear()

    def _budget_warning(self, budget_mib: float) -> str:
        """ " · ⚠ budget below …" when the budget cannot hold the largest model loaded, or what the process holds."""
        if self._largest is not None and self._largest[1] > budget_mib * MIB:
            name, nbytes = self._largest
            return f" · ⚠ below the {name} model ({fmt_size(nbytes)})"
        if self.rss and self.rss[-1] > budget_mib:
            return " · ⚠ below host RSS"
        return ""

    def _label_budget(self, budget_mib: float, t: list[float], shown: bool) -> None:
        """The dashed budget line says what it is on the plot, not only in the legend (a narrow dock
        crops the legend column, and the line read as a second, unlabelled curve)."""
        self.budget_label.setVisible(shown and bool(t))
        if shown and t:
            self.budget_label.setText(f"budget {fmt_size(int(budget_mib * MIB))}")
            left = self.memory_plot.getPlotItem().getViewBox().viewRange()[0][0]
            self.budget_label.setPos(max(t[0], left), budget_mib)

    def _in_legend(self, curve: Any, show: bool) -> None:
        """The steps legend lists only the series this run has (it would hide the points otherwise)."""
        legend = self.steps_plot.getPlotItem().legend
        listed = any(sample.item is curve for sample, _label in legend.items)
        if show and not listed:
            legend.addItem(curve, curve.name())
        elif not show and listed:
            legend.removeItem(curve)

    def _draw_timeline(self) -> None:
        for item in self.timeline_bars:
            self.timeline_plot.removeItem(item)
        self.timeline_bars = []
        order = [nid for nid in self.run_order if nid in self.spans] or list(self.spans)
        if not order:
            return
        colors = {
            "done": theme.DONE,
            "running": theme.RUNNING,
            "error": theme.ERROR,
            "cached": theme.CACHED,
            "cancelled": theme.TEXT_DIM,
        }
        latest = max((s.end or s.start) for s in self.spans.values())
        for row, nid in enumerate(order):
            span = self.spans[nid]
            end = span.end if span.end is not None else max(latest, span.start + 0.01)
            parts = [(span.start, max(end, span.start + 0.005), colors.get(span.status, theme.DONE), 0.5)]
            parts += [(a, b, "#ffa726", 0.7) for a, b, _ in span.loads]
            parts += [(a, b, "#8d99ae", 0.7) for a, b, _ in span.unloads]
            for x0, x1, color, height in parts:
                bar = pg.BarGraphItem(
                    x0=[x0],
                    x1=[max(x1, x0 + 0.004)],
                    y=[row],
                    height=height,
                    brush=pg.mkBrush(color),
                    pen=pg.mkPen(color),
                )
                self.timeline_plot.addItem(bar)
                self.timeline_bars.append(bar)
            # ✕ as on a cancelled node's badge; the grey bar says it too.
            words = {"cached": "cached", "cancelled": f"{end - span.start:.2f} s ✕"}
            text = pg.TextItem(
                words.get(span.status, f"{end - span.start:.2f} s"),
                color=theme.TEXT_DIM,
                anchor=(0, 0.5),
            )
            # Right of every bar of the row (a cached node's minimum-width bar covered its "cached").
            text.setPos(max(max(x1, x0 + 0.004) for x0, x1, _, _ in parts), row)
            text.setZValue(10)
            self.timeline_plot.addItem(text)
            self.timeline_bars.append(text)
        axis = self.timeline_plot.getAxis("left")
        # pyqtgraph leaves out a tick label wider than its axis: long ids are elided in the middle to fit
        # (the whole id is in the tooltip), and the axis grows up to TIMELINE_AXIS_MAX for them.
        metrics = QFontMetrics(axis.style.get("tickFont") or QFont())
        width = min(TIMELINE_AXIS_MAX, max(60, max(metrics.horizontalAdvance(n) for n in order) + 14))
        room = width - 14
        names = [metrics.elidedText(nid, Qt.TextElideMode.ElideMiddle, room) for nid in order]
        axis.setTicks([list(enumerate(names)), []])
        axis.setStyle(hideOverlappingLabels=False)
        axis.setWidth(width)
        self.timeline_plot.setToolTip("\n".join(order))
        self.timeline_plot.setYRange(-0.7, len(order) - 0.3, padding=0)
        first = min(s.start for s in self.spans.values())
        self.timeline_plot.setXRange(first, first + max(latest - first, 0.05) * 1.22, padding=0.02)
