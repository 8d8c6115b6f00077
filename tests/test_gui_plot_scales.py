"""Memory plot and timeline as issue 29 found them: small budgets in MiB, the axis keeps the data in view,
a warning when the budget is below the model, the budget line labelled; every timeline row named, and
"cached" right of its bar."""

from __future__ import annotations

from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication

from app.gui.plots import PlotsPanel
from app.gui.run_worker import TimedEvent
from memory.telemetry import LoadEvent, Sample
from nodes.events import NodeCached, NodeFinished, NodeStarted, RunStarted

MIB = 1024 * 1024


def samples(t0: float, rss_mib: int, budget_mib: int, n: int = 30) -> list[Sample]:
    rss = rss_mib * MIB  # on a CPU the device is host memory: allocated = reserved = RSS
    return [
        Sample(t0 + i * 0.1, rss, rss, 24 * 1024 * MIB, budget_mib * MIB, rss, 8 * 1024 * MIB)
        for i in range(n)
    ]


def test_a_10_mib_budget_reads_in_mib_keeps_the_curve_and_warns(qtbot) -> None:
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.new_run()
    panel.add_records(samples(0.0, 720, 10))
    panel.add_records([LoadEvent("m/unet", "unet", 12 * MIB, 0.1, "disk", "cpu", t=1.0)])
    panel.redraw()
    title = panel.memory_plot.getPlotItem().titleLabel.text
    assert "budget 10 MiB" in title and "0.0 GiB" not in title
    assert "⚠ below the unet model (12 MiB)" in title
    top = panel.memory_plot.getPlotItem().getViewBox().viewRange()[1][1]
    assert top >= 720  # the RSS curve is in view
    assert panel.budget_label.isVisible() and panel.budget_label.toPlainText() == "budget 10 MiB"


def test_after_switching_budgets_every_line_is_named(qtbot) -> None:
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.new_run()
    panel.add_records(samples(0.0, 720, 10))
    panel.redraw()
    panel.new_series()
    panel.new_run()
    panel.add_records(samples(10.0, 720, 1024))
    panel.redraw()
    visible = [
        c for c in panel.memory_plot.getPlotItem().listDataItems() if c.isVisible() and c.xData is not None
    ]
    legend = {sample.item for sample, _ in panel.memory_plot.getPlotItem().legend.items}
    assert all(c in legend for c in visible)
    # The budget line is named on the plot too, where it ends.
    assert panel.budget_label.isVisible() and panel.budget_label.toPlainText() == "budget 1.0 GiB"
    assert "⚠" not in panel.memory_plot.getPlotItem().titleLabel.text


def test_timeline_names_every_row_and_cached_is_right_of_its_bar(qtbot) -> None:
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 400)
    panel.show()
    ids = ["load", "text_encode_positive_prompt_for_the_sampler", "cached_checkpoint_loader_node"]
    panel.new_run()
    panel.add_run_event(TimedEvent(0.0, RunStarted(0, tuple(ids))))
    panel.add_run_event(TimedEvent(0.0, NodeCached(ids[2], "LoadDiffusionModel")))
    for i, nid in enumerate(ids[:2]):
        panel.add_run_event(TimedEvent(0.01 + i * 0.01, NodeStarted(nid, "X")))
        panel.add_run_event(TimedEvent(0.02 + i * 0.01, NodeFinished(nid, "X", 0.01, (), {})))
    panel.redraw()
    QApplication.processEvents()  # the axis takes its new width at the next layout
    axis = panel.timeline_plot.getAxis("left")
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    _axis_spec, _ticks, texts = axis.generateDrawSpecs(painter)
    painter.end()
    drawn = [text for _rect, _flags, text in texts]
    assert len(drawn) == len(ids) and all(drawn)  # each row has a (possibly elided) name
    row = ids.index(ids[2])
    bars = [b for b in panel.timeline_bars if hasattr(b, "opts") and b.opts.get("y") == [row]]
    label = next(t for t in panel.timeline_bars if hasattr(t, "toPlainText") and t.toPlainText() == "cached")
    assert bars and all(label.pos().x() >= max(b.opts["x1"]) for b in bars)
    assert label.zValue() > max(b.zValue() for b in bars)


def test_a_new_memory_managers_clock_starts_a_new_series(qtbot) -> None:
    """Settings changed: the old manager's last samples may arrive after the switch, and the new manager's
    clock starts again at 0. The curves must not draw a line back across the plot."""
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.new_run()
    panel.add_records(samples(0.0, 720, 10, n=60))  # t 0 .. 5.9
    panel.new_series()  # what the window does after Settings
    panel.add_records(samples(6.0, 720, 10, n=3))  # the old manager's last samples, drained late
    panel.add_records(samples(0.1, 730, 1024, n=30))  # the new manager: t from 0 again
    panel.redraw()
    for curve in (panel.curve_rss, panel.curve_budget):
        xs = list(curve.xData)
        assert xs == sorted(xs) and xs[0] >= 0.1, curve.name()
    assert set(panel.curve_budget.yData) == {1024.0}  # only the new budget
