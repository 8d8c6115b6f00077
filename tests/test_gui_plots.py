"""The memory plot: a settings change starts a new series (no diagonal joining two memory managers'
samples), and the x-axis follows the last runs instead of the whole session; a closed dock's plots are built
when it is opened, with what came in meanwhile."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg

from app.gui.plots import RUNS_SHOWN, PlotsPanel
from app.gui.settings import SettingsDialog
from memory.telemetry import LoadEvent, Sample, StepEvent
from tests.gui_support import make_window

MIB = 1024 * 1024


def samples(start: float, stop: float, rss_mib: int) -> list[Sample]:
    return [
        Sample(
            t=start + i * 0.5,
            device_allocated=rss_mib * MIB,
            device_reserved=rss_mib * MIB,
            device_total=0,
            budget=4096 * MIB,
            host_rss=rss_mib * MIB,
            host_available=0,
        )
        for i in range(int((stop - start) / 0.5))
    ]


def test_a_policy_change_starts_a_new_memory_series(qtbot, tmp_path: Path, registry, monkeypatch) -> None:
    window = make_window(qtbot, tmp_path, registry, plots=True)
    window.plots.add_records(samples(0, 10, 300))
    monkeypatch.setattr(
        SettingsDialog,
        "exec",
        lambda self: (self.policy.setCurrentText("sequential"), self.accept(), 1)[-1],
    )
    window.open_settings()
    window.plots.add_records(samples(0, 5, 900))  # the new manager's clock starts again
    window.plots.redraw()
    x, y = window.plots.curve_rss.getData()
    assert list(x) == sorted(x) and set(y) == {900}  # only the new series, no line back in time


def test_the_memory_axis_follows_the_last_runs(qtbot) -> None:
    plots = PlotsPanel()  # alone: a window's own memory manager would add live samples
    qtbot.addWidget(plots)
    for run in range(RUNS_SHOWN + 3):
        plots.new_run()
        plots.add_records(samples(run * 100, run * 100 + 20, 300))
    plots.redraw()
    (left, right), _ = plots.memory_plot.getPlotItem().viewRange()
    # A run starts where the previous one left off (t=219.5 for the fourth run): earlier runs are off the left.
    assert left > 200
    assert right >= (RUNS_SHOWN + 2) * 100 + 19


def test_the_memory_legend_covers_no_data(qtbot) -> None:
    plots = PlotsPanel()
    qtbot.addWidget(plots)
    plots.resize(600, 200)  # the dock's usual height: the stacked legend reached the curve
    plots.show()
    qtbot.waitExposed(plots)
    plots.new_run()
    # RSS climbing to its peak at the newest sample: where the legend used to sit (top right).
    plots.add_records([s for i in range(20) for s in samples(i, i + 0.5, 200 + 40 * i)])
    plots.redraw()
    item = plots.memory_plot.getPlotItem()
    item.layout.activate()  # the plot's layout places the legend (the event loop does it in the app)
    item.getViewBox().updateMatrix()
    legend = item.legend.mapRectToScene(item.legend.boundingRect())
    x, y = plots.curve_rss.getData()
    points = [item.getViewBox().mapViewToScene(pg.Point(a, b)) for a, b in zip(x, y, strict=True)]
    assert points and not any(legend.contains(p) for p in points)
    assert not legend.adjusted(1, 0, 0, 0).intersects(item.getViewBox().sceneBoundingRect())  # beside it
    budget = item.getViewBox().mapViewToScene(pg.Point(x[-1], plots.budget[-1]))
    assert not legend.contains(budget)


def test_the_steps_panel_with_nothing_or_one_step(qtbot) -> None:
    plots = PlotsPanel()
    qtbot.addWidget(plots)
    plots.redraw()
    assert not plots.steps_plot.getPlotItem().legend.isVisible()  # no empty legend square
    plots.new_run()
    plots.add_records([StepEvent("sampler", "sampler_step", 1, 1, 0.25)])
    plots.redraw()
    assert plots.steps_plot.getPlotItem().legend.isVisible()
    (left, right), _ = plots.steps_plot.getPlotItem().viewRange()
    assert 0 <= left < 1 < right <= 3  # around the one step, not -5..10


def test_plots_opened_after_a_run_show_what_came_in_while_closed(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)  # the Live plots dock closed
    window.plots.new_run()
    window.plots.add_records(
        [*samples(0, 5, 300), LoadEvent("m/unet", "unet", 12 * MIB, 0.5, "disk", "cpu", t=2.0)]
    )
    assert not window.plots.built  # nothing drawn for a dock nobody sees
    window.plots_dock.show()
    qtbot.waitUntil(lambda: window.plots.memory_plot.isVisible())
    window.plots.redraw()
    x, y = window.plots.curve_rss.getData()
    assert len(x) == 10 and set(y) == {300}
    lines = [i for i in window.plots.memory_plot.getPlotItem().items if isinstance(i, pg.InfiniteLine)]
    assert [line.label.toPlainText() for line in lines] == ["+unet\n12 MiB"]
