"""Progress and plots in the window (issue 16 items 6 and 8): a node shows what it is loading and how far;
a cancelled node's timeline bar covers the time it really ran; clustered load/unload labels on the memory
plot do not overlap."""

from __future__ import annotations

import time
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtWidgets import QApplication

from app.gui.plots import PlotsPanel
from app.gui.run_worker import TimedEvent
from memory.telemetry import LoadEvent, Sample, UnloadEvent
from nodes.events import NodeProgress, NodeStarted, RunStarted
from nodes.workflow import workflow_from_dict
from tests.gui_support import make_window
from tests.nodes_for_tests import Calls, make_registry

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
GIB = 1024 * MIB


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        QApplication.processEvents()
        time.sleep(0.01)


def test_a_node_shows_the_model_it_loads_and_how_far(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    assert window.open_path(REPO / "resources" / "workflows" / "txt2img.json")
    window.on_run_event(TimedEvent(0.0, RunStarted(0, ("sampler",))))
    window.on_run_event(TimedEvent(0.1, NodeStarted("sampler", "Sampler")))
    loading = NodeProgress("sampler", int(0.8 * GIB), int(3.2 * GIB), 400 * MIB, "load_bytes", "unet")
    window.on_run_event(TimedEvent(0.5, loading))
    item = window.scene.node_items["sampler"]
    assert item._badge()[0] == "loading unet 0.8/3.2 GiB"
    assert window.statusBar().currentMessage() == "sampler: loading unet 0.8/3.2 GiB · 400.0 MiB/s"
    window.on_run_event(TimedEvent(0.9, NodeProgress("sampler", 3, 20, 2.5, "sampler_step")))
    assert item._badge()[0] == "3/20"


def steps_graph(registry, steps: int) -> object:
    return workflow_from_dict(
        {
            "format": "nodeloom.workflow",
            "version": 1,
            "nodes": {
                "number": {"type": "Number", "params": {"value": 3}},
                "slow": {
                    "type": "Steps",
                    "params": {"steps": steps, "delay": 0.01},
                    "inputs": {"value": ["number", "value"]},
                },
            },
        },
        registry,
    )


def test_a_cancelled_nodes_timeline_bar_covers_the_time_it_ran(qtbot, tmp_path: Path) -> None:
    registry = make_registry(Calls())
    window = make_window(qtbot, tmp_path, registry, for_runs=True, plots=True)
    window.model.load(steps_graph(registry, 1000))
    assert window.run_workflow()
    wait_until(lambda: window.scene.run_states["slow"].step >= 20)
    time.sleep(0.3)  # the node keeps working; the user cancels a while after its last step
    cancelled_at = window.runner.now()
    window.cancel_run()
    wait_until(lambda: window.last_result is not None)
    assert window.last_result.cancelled
    window.plots.redraw()
    span = window.plots.spans["slow"]
    # Before: no finish event for a cancelled node, so its bar ended at its own start + 0.01 s.
    assert span.status == "cancelled" and span.end is not None and span.end >= cancelled_at
    labels = [i.toPlainText() for i in window.plots.timeline_bars if hasattr(i, "toPlainText")]
    assert any(text.endswith(" s ✕") for text in labels)


def test_clustered_load_and_unload_labels_do_not_overlap(qtbot) -> None:
    plots = PlotsPanel()  # alone: a window's own memory manager would add live samples
    qtbot.addWidget(plots)
    plots.resize(1000, 420)
    plots.show()
    plots.new_run()
    samples = [
        Sample(
            t=i * 0.05,
            device_allocated=0,
            device_reserved=0,
            device_total=0,
            budget=8 * GIB,
            host_rss=400 * MIB,
            host_available=0,
        )
        for i in range(100)
    ]
    # The sequential policy loads and unloads each component within a fraction of a second.
    marks = [
        LoadEvent("text_encoder", "text_encoder", 235 * MIB, 0.12, "disk", "cpu", t=0.5),
        UnloadEvent("text_encoder", 235 * MIB, 0.01, t=0.62),
        LoadEvent("text_encoder", "text_encoder", 235 * MIB, 0.1, "disk", "cpu", t=0.75),
        UnloadEvent("text_encoder", 235 * MIB, 0.01, t=0.86),
        LoadEvent("unet", "denoiser", 3300 * MIB, 0.3, "disk", "cpu", t=1.2),
        UnloadEvent("unet", 3300 * MIB, 0.02, t=3.0),
        LoadEvent("vae", "vae", 320 * MIB, 0.05, "disk", "cpu", t=3.08),
        UnloadEvent("vae", 320 * MIB, 0.01, t=3.1),
        LoadEvent("unet", "denoiser", 3300 * MIB, 0.2, "disk", "cpu", t=3.15),
        UnloadEvent("unet", 3300 * MIB, 0.02, t=3.2),
    ]
    plots.add_records(samples + marks)
    plots.redraw()
    QApplication.processEvents()
    plots.redraw()
    lines = [
        item
        for item in plots.memory_plot.getPlotItem().items
        if isinstance(item, pg.InfiniteLine) and getattr(item, "label", None) is not None
    ]
    assert len(lines) == len(marks)
    shown = [line.label for line in lines if line.label.isVisible()]
    rects = [label.mapRectToScene(label.boundingRect()) for label in shown]
    box = plots.memory_plot.getPlotItem().getViewBox().sceneBoundingRect()
    assert all(box.contains(r) for r in rects)
    legend = plots.memory_plot.getPlotItem().legend
    rects.append(legend.mapRectToScene(legend.boundingRect()))  # nor under the legend
    assert not [(a, b) for i, a in enumerate(rects) for b in rects[i + 1 :] if a.intersects(b)]
    # Most stay on the plot; one that has no room is still named by its neighbour's tooltip.
    assert len(shown) >= len(marks) - 3
    hidden = [line.label.format for line in lines if not line.label.isVisible()]
    tips = "\n".join(line.toolTip() for line in lines)
    assert all(name in tips for name in hidden)
