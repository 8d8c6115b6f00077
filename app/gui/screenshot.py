"""Take the README screenshot: open a workflow, run it, and save the window as a PNG once it is done.

Lives here: `take_screenshot`, `main`. Imports Qt, `app.gui.*`, `nodes.registry`.

    python -m app.gui.screenshot resources/screenshots/main_window.png [--workflow FILE] [--size 1600x1000]
        [--show output|queue|history|plan] [--policy NAME] [--ram-budget SIZE] [--grab window|plots|node]
        [--server URL] [--import COMFY_FILE]

`--policy`/`--ram-budget` run under that memory setting (a CPU run's budget); `--grab plots` saves only the
Live plots dock (memory plot and timeline), `--grab node` only the selected node on the canvas.

Runs offscreen when there is no display. Settings and outputs go to a temporary folder, so the user's own
settings, recent files and autosave are untouched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_WORKFLOW = Path(__file__).resolve().parents[2] / "resources" / "workflows" / "txt2img.json"


def take_screenshot(
    out: Path,
    workflow: Path,
    size: tuple[int, int],
    select: str | None,
    timeout: float,
    show: str = "output",
    memory: tuple[str, str | None] = ("auto", None),
    grab: str = "window",
    server: str | None = None,
    imported: Path | None = None,
) -> int:
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # As `app` does (app/main.py): sleeping OpenMP workers, or a busy machine makes the run look slow.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtWidgets import QApplication

    from app.gui.autosave import Autosave
    from app.gui.main_window import MainWindow
    from app.gui.settings import AppSettings
    from app.gui.theme import apply_theme
    from nodes.registry import default_registry

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app)  # type: ignore[arg-type]
    tmp = Path(tempfile.mkdtemp(prefix="nodeloom-shot-"))
    settings = AppSettings(QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat))
    settings.set_output_dir(tmp / "outputs")
    if memory != ("auto", None):  # else the default settings, as for the other README screenshots
        from memory.config import MemoryConfig

        settings.set_memory(MemoryConfig(device="cpu", policy=memory[0], ram_budget=memory[1]))
    window = MainWindow(default_registry(), settings, Autosave(tmp / "autosave"))
    window.resize(*size)
    window.show()

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    pump(0.3)
    if imported is not None:  # File > Import of another tool's file: the summary and marks, no run
        from app.importing import import_file

        if not window.import_path(imported, import_file):
            print(f"could not import {imported}: {window.last_problems}", file=sys.stderr)
            return 1
        pump(0.3)
        window.view.fit()
        pump(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        window.grab().save(str(out))
        marks = out.with_name(out.stem + "-marks" + out.suffix)  # the summary dismissed: the nodes' marks
        window.import_marks.banner.dismiss_button.click()
        pump(0.3)
        window.grab().save(str(marks))
        print(f"imported {imported}; saved {out} and {marks}")
        window._force_dirty = False
        window.undo_stack.setClean()
        window.close()
        return 0
    if not window.open_path(workflow, confirm=False):
        print(f"could not open {workflow}: {window.last_problems}", file=sys.stderr)
        return 1
    pump(0.2)
    window.view.fit()
    pump(1.0)  # a second of idle memory samples before the run
    if server:  # File > Connect to Server first: the run goes there
        window.remote.connect_to(server, os.environ.get("NODELOOM_SERVER_TOKEN") or None)
        connect_deadline = time.monotonic() + 30
        while not window.remote.connected and time.monotonic() < connect_deadline:
            pump(0.05)
        if not window.remote.connected:
            print(f"could not connect to {server}", file=sys.stderr)
            return 1
    if show in ("queue", "history"):  # seeds that step on after each run, so the runs differ
        for nid in window.model.node_ids():
            if "seed" in window.model.node(nid).params:
                window.set_seed_control(nid, "seed", "increment")
    window.run_workflow()
    if show == "queue":  # two more while the first runs: the queue dock lists them
        window.run_workflow()
        window.run_workflow()
        window.queue_dock.raise_()
        window.queue.list.setCurrentRow(0)
        pump(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        window.grab().save(str(out))
        print(f"saved {out} while {len(window.queue.jobs)} runs wait")
        window.queue.clear()
        window.runner.cancel()
        window.runner.wait(30)
        window._force_dirty = False
        window.undo_stack.setClean()
        window.close()
        return 0
    if show == "history":
        window.run_workflow()
        window.run_workflow()
    deadline = time.monotonic() + timeout
    while (
        window.last_result is None or window.runner.running or window.queue.jobs or window.remote.run.running
    ) and time.monotonic() < deadline:
        pump(0.05)
    pump(1.0)  # samples after the run, then the plots redraw
    plan_deadline = time.monotonic() + 120
    while window.plan_ui.controller.busy and time.monotonic() < plan_deadline:  # the live plan's node bars
        pump(0.05)
    if select and select in window.scene.node_items:
        window.scene.clearSelection()
        window.scene.node_items[select].setSelected(True)
    window.view.fit()
    window.output.setCurrentIndex(0 if window.output.files.count() else 1)  # pictures, else streamed text
    window.plots.build()  # made on first show: a saved layout may have the dock closed
    window.plots.tabs.setCurrentIndex(1)  # the per-node timeline of the run
    window.plots.redraw()
    if show == "history":
        window.outputs_dock.raise_()
    if show == "plan":
        window.plan_ui.dock.raise_()
        # Tall enough for txt2img's seven rows: the dock's default height shows four.
        window.resizeDocks([window.plan_ui.dock], [int(size[1] * 0.42)], Qt.Orientation.Vertical)
        pump(0.2)
        window.view.fit()  # the canvas is shorter now
    pump(0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    _grab(window, grab, select).save(str(out))
    result = window.last_result
    ok = result is not None and (
        result.get("ok") if isinstance(result, dict) else getattr(result, "ok", False)
    )
    print(f"{'ran' if ok else 'run did not finish cleanly'}; saved {out}")
    window._force_dirty = False
    window.undo_stack.setClean()
    window.close()
    return 0 if ok else 2


def _grab(window: Any, what: str, select: str | None) -> Any:
    """The window, the Live plots dock, or the selected node's canvas area (a QPixmap)."""
    if what == "plots":
        return window.plots_dock.grab()
    if what == "node" and select in window.scene.node_items:
        view, item = window.view, window.scene.node_items[select]
        view.set_zoom(1.0)  # the node at its own size, with its neighbours' wires
        view.centerOn(item)
        window.minimap.setVisible(False)
        area = view.mapFromScene(item.sceneBoundingRect()).boundingRect().adjusted(-60, -40, 60, 40)
        return view.viewport().grab(area)
    return window.grab()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.gui.screenshot", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--workflow", type=Path, default=DEFAULT_WORKFLOW)
    p.add_argument("--size", default="1600x1000", help="window size WxH")
    p.add_argument("--select", default="positive", help="node to select so the inspector shows it")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the run")
    p.add_argument(
        "--show",
        choices=("output", "queue", "history", "plan"),
        default="output",
        help="output: one run; queue: two more queued mid-run; history: three runs, the output history; "
        "plan: one run, the Plan dock raised",
    )
    p.add_argument("--policy", default="auto", help="memory policy for the run (as Settings)")
    p.add_argument("--ram-budget", default=None, help="the run's budget on this CPU, e.g. 10MiB")
    p.add_argument(
        "--server", default=None, help="run on this `app serve` (token from $NODELOOM_SERVER_TOKEN)"
    )
    p.add_argument(
        "--import", dest="imported", type=Path, default=None, help="File > Import this file instead"
    )
    p.add_argument("--grab", choices=("window", "plots", "node"), default="window", help="what to save")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    return take_screenshot(
        args.out,
        args.workflow,
        (width, height),
        args.select,
        args.timeout,
        args.show,
        (args.policy, args.ram_budget),
        args.grab,
        args.server,
        args.imported,
    )


if __name__ == "__main__":
    sys.exit(main())
