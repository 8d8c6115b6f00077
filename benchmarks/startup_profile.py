"""Where the first Run's CPU goes (issue 29): the editor in this process (offscreen by default), Run pressed as
soon as the window is shown, every thread profiled with cProfile, and the run's node events timed.

    python benchmarks/startup_profile.py [--workflow resources/workflows/txt2img.json] [--out DIR] [--top 25]

Prints, per thread (GUI, torch warm-up, model-library warm-up, run), its CPU time and its top functions by
cumulative time, per node of the run its wall time (load, encode, sample, decode, save), and how responsive
the window stayed (the lateness of a 20 ms timer on the GUI thread while the libraries load); writes one
`<thread>.prof` per thread into `--out` (read with `python -m pstats`). For the imports alone run it under
`python -X importtime` (stderr). Profiling slows Python code about 1.5-2x, so compare its figures with each
other, not with `benchmarks/startup.py`'s. Imports Qt and `app.gui` (it is the editor); a measuring tool,
not part of the app.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKFLOW = REPO / "resources" / "workflows" / "txt2img.json"


class ThreadProfiles:
    """Runs every thread started from now on under its own cProfile and keeps its CPU time."""

    def __init__(self, profile: bool = True) -> None:
        self.profile = profile
        self.profiles: dict[str, cProfile.Profile] = {}
        self.cpu: dict[str, float] = {}
        self._lock = threading.Lock()
        self._run = threading.Thread.run

    def install(self) -> None:
        original, store = self._run, self

        def run(thread: threading.Thread) -> None:
            prof = cProfile.Profile()
            start = time.thread_time()
            if store.profile:
                prof.enable()
            try:
                original(thread)
            finally:
                prof.disable()
                with store._lock:
                    if store.profile:
                        store.profiles[thread.name] = prof
                    store.cpu[thread.name] = time.thread_time() - start

        threading.Thread.run = run  # type: ignore[method-assign]


def _top(prof: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start : start + top + 1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflow", type=Path, default=DEFAULT_WORKFLOW)
    p.add_argument("--out", type=Path, default=None, help="folder for the .prof files (default: a temp dir)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="only each thread's CPU time and the node times (no cProfile)",
    )
    p.add_argument(
        "--hide-plots", action="store_true", help="close the Live plots dock first (what its redraws cost)"
    )
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    home = Path(tempfile.mkdtemp(prefix="nodeloom-profile-"))
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")  # fresh settings: no recovery prompt
    os.chdir(home)  # the default output folder is ./outputs
    out_dir = args.out.resolve() if args.out else home / "profiles"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0, cpu0 = time.monotonic(), time.process_time()
    threads = ThreadProfiles(profile=not args.no_profile)
    threads.install()
    gui = cProfile.Profile()
    if not args.no_profile:
        gui.enable()
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    import app.main  # noqa: F401  (the environment defaults it sets, as a launch does)
    from app.gui import launch
    from app.gui.main_window import MainWindow
    from nodes.events import NodeFinished, NodeStarted
    from nodes.registry import default_registry
    from pipelines.diffusion.lazy_models import install

    install()  # as `app.main.main` does before it launches the editor

    marks: dict[str, float] = {}
    nodes: list[tuple[str, float, float]] = []  # node id, start, seconds (run clock)
    started: dict[str, float] = {}

    def on_event(timed: Any) -> None:
        event = timed.event
        if isinstance(event, NodeStarted):
            started[event.node_id] = time.monotonic() - t0
        elif isinstance(event, NodeFinished):
            nodes.append((event.node_id, started.get(event.node_id, 0.0), event.seconds))

    def poll() -> None:
        window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)
        if window is None or not window.isVisible():
            QTimer.singleShot(5, poll)
            return
        if "window" not in marks:
            marks["window"], marks["window_cpu"] = time.monotonic() - t0, time.process_time() - cpu0
            window.runner.run_event.connect(on_event)
            if args.hide_plots:
                window.plots_dock.hide()
            tickers.append(QTimer())
            tickers[0].setInterval(20)
            tickers[0].timeout.connect(tick)
            tickers[0].start()
            window.run_workflow()
        if any((home / "outputs").glob("*.png")):
            marks["picture"], marks["picture_cpu"] = time.monotonic() - t0, time.process_time() - cpu0
            window.close()
            QApplication.instance().quit()
        elif time.monotonic() - t0 > args.timeout:
            print("error: no picture before the timeout", file=sys.stderr)
            QApplication.instance().quit()
        else:
            QTimer.singleShot(50, poll)

    # The window's responsiveness while the libraries load behind it: a 20 ms timer on the GUI thread, and how
    # late each tick came (a tick waits for the interpreter lock and for whatever the GUI thread is doing).
    gaps: list[float] = []
    last = [0.0]

    def tick() -> None:
        now = time.monotonic()
        if last[0] and "window" in marks and "picture" not in marks:
            gaps.append(now - last[0])
        last[0] = now

    tickers: list[QTimer] = []  # started with the window (a QTimer needs the application launch makes)
    QTimer.singleShot(0, poll)
    launch(args.workflow.resolve(), default_registry())
    gui.disable()
    threads.cpu["MainThread"] = time.process_time() - cpu0 - sum(threads.cpu.values())
    if not args.no_profile:
        threads.profiles["MainThread"] = gui
    print(
        f"window shown {marks.get('window', float('nan')):.2f} s (CPU {marks.get('window_cpu', float('nan')):.2f} s); "
        f"picture {marks.get('picture', float('nan')):.2f} s (CPU {marks.get('picture_cpu', float('nan')):.2f} s, "
        f"all threads{'' if args.no_profile else ', under the profiler'})"
    )
    if gaps:
        ordered = sorted(gaps)
        print(
            f"GUI thread, window shown -> picture: a 20 ms timer ticked every {statistics.median(ordered) * 1000:.0f} "
            f"ms (median), 95th percentile {ordered[int(0.95 * (len(ordered) - 1))] * 1000:.0f} ms, longest "
            f"{ordered[-1] * 1000:.0f} ms"
        )
    for node_id, start, seconds in nodes:
        print(f"  node {node_id}: started {start:.2f} s, {seconds:.2f} s")
    for name, cpu in sorted(threads.cpu.items(), key=lambda kv: -kv[1]):
        print(f"\n== thread {name}: CPU {cpu:.2f} s ==")
        if name in threads.profiles:
            threads.profiles[name].dump_stats(out_dir / f"{name}.prof")
            print(_top(threads.profiles[name], args.top))
    print(f"\nprofiles in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
