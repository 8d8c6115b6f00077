"""Start-up of the editor, measured from outside (issue 29): launch `app WORKFLOW` under Xvfb, wait for its
window to be mapped, press Ctrl+Enter in it (xdotool), and wait for the run's picture in the output folder.

    python benchmarks/startup.py [--workflow resources/workflows/txt2img.json] [--launches 3] [--warmup 1]

Prints, per launch: window open (launch -> window mapped), first Run done (launch -> picture written, Run
pressed as soon as the window is up), the run itself (Run pressed -> picture), and the app's CPU time (user +
system, all threads) at both points: on a machine shared with other work the wall times stretch, the CPU
times much less (on a quiet machine the wall time is about the CPU time, or less where torch's two threads
overlap). The first `--warmup`
launches fill the page cache and are not counted (the targets are for a warm cache: window <= 4 s, first
Run <= 6 s after launch, on a quiet 2-core machine). Each launch gets a fresh settings folder, output folder
and Xvfb display; the user data dir (demo models, learned peaks) is shared, as on a user's machine.

Needs Xvfb and xdotool (`apt-get install xvfb xdotool`) and the X libraries Qt's xcb plugin loads (the app names
any missing one at launch). Imports only the standard library: the app runs in
a child process, so nothing here is imported into it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKFLOW = REPO / "resources" / "workflows" / "txt2img.json"


def _free_display() -> int:
    for n in range(90, 200):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise RuntimeError("no free X display number")


def _window(display: str) -> str | None:
    """The id of Nodeloom's visible main window, or None."""
    out = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", "Nodeloom"],
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        text=True,
    )
    ids = out.stdout.split()
    return ids[0] if ids else None


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def launch_once(workflow: Path, timeout: float) -> dict[str, float]:
    number = _free_display()
    display = f":{number}"
    xvfb = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    home = Path(tempfile.mkdtemp(prefix="nodeloom-startup-"))
    app: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 20
        # Ready when it answers (its socket file can outlive the previous launch's server for a moment).
        while (
            subprocess.run(
                ["xdotool", "getdisplaygeometry"], env={**os.environ, "DISPLAY": display}, capture_output=True
            ).returncode
            != 0
        ):
            if time.monotonic() > deadline or xvfb.poll() is not None:
                raise RuntimeError("Xvfb did not start")
            time.sleep(0.05)
        env = {
            **os.environ,
            "DISPLAY": display,
            "XDG_CONFIG_HOME": str(home / "config"),  # fresh QSettings: no recovery prompt, default docks
            "PYTHONPATH": str(REPO),
        }
        env.pop("QT_QPA_PLATFORM", None)
        outputs = home / "outputs"
        started = time.monotonic()
        # stderr to a file: a pipe nobody reads while the app runs fills up (64 KiB) and then blocks the app.
        stderr_file = home / "stderr.txt"
        with stderr_file.open("wb") as stderr:
            app = subprocess.Popen(
                [sys.executable, "-m", "app.main", str(workflow)],
                cwd=home,  # the default output folder is ./outputs
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        window = None
        while window is None:
            if app.poll() is not None:
                raise RuntimeError(f"the app exited: {stderr_file.read_text(errors='replace')[-2000:]}")
            if time.monotonic() - started > timeout:
                raise RuntimeError("no window")
            window = _window(display)
            if window is None:
                time.sleep(0.02)
        opened = time.monotonic() - started
        opened_cpu = _cpu_seconds(app.pid)
        # No window manager under Xvfb: focus the window, then type through XTEST (a synthetic event sent with
        # `key --window` is ignored by Qt).
        subprocess.run(["xdotool", "windowfocus", "--sync", window], env=env, capture_output=True, timeout=10)
        subprocess.run(["xdotool", "key", "ctrl+Return"], env=env, check=True)
        pressed = time.monotonic() - started
        while not (outputs.is_dir() and any(outputs.glob("*.png"))):
            if app.poll() is not None:
                raise RuntimeError(f"the app exited: {stderr_file.read_text(errors='replace')[-2000:]}")
            if time.monotonic() - started > timeout:
                raise RuntimeError("the run wrote no picture")
            time.sleep(0.02)
        done = time.monotonic() - started
        done_cpu = _cpu_seconds(app.pid)
        return {
            "window_s": opened,
            "pressed_s": pressed,
            "first_run_s": done,
            "run_s": done - pressed,
            "window_cpu_s": opened_cpu,
            "first_run_cpu_s": done_cpu,
        }
    finally:
        if app is not None and app.poll() is None:
            app.kill()
            app.wait(10)
        xvfb.terminate()
        xvfb.wait(10)
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflow", type=Path, default=DEFAULT_WORKFLOW)
    p.add_argument("--launches", type=int, default=3, help="measured launches")
    p.add_argument("--warmup", type=int, default=1, help="launches first, not counted (page cache)")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    for tool in ("Xvfb", "xdotool"):
        if shutil.which(tool) is None:
            print(f"error: {tool} not found (apt-get install xvfb xdotool)", file=sys.stderr)
            return 2
    rows = []
    for i in range(args.warmup + args.launches):
        row = launch_once(args.workflow.resolve(), args.timeout)
        tag = "warm-up" if i < args.warmup else f"launch {i - args.warmup + 1}"
        print(
            f"{tag}: window open {row['window_s']:.2f} s; first Run done {row['first_run_s']:.2f} s after launch "
            f"(Run pressed at {row['pressed_s']:.2f} s, the run {row['run_s']:.2f} s); the app's CPU time: "
            f"{row['window_cpu_s']:.2f} s to the window, {row['first_run_cpu_s']:.2f} s to the picture",
            flush=True,
        )
        if i >= args.warmup:
            rows.append(row)
    if rows:
        load = os.getloadavg()[0]
        print(
            f"median of {len(rows)}: window open {statistics.median(r['window_s'] for r in rows):.2f} s, "
            f"first Run done {statistics.median(r['first_run_s'] for r in rows):.2f} s after launch; CPU time "
            f"{statistics.median(r['window_cpu_s'] for r in rows):.2f} s and "
            f"{statistics.median(r['first_run_cpu_s'] for r in rows):.2f} s "
            f"(targets 4 s and 6 s on a quiet 2-core machine; load average here {load:.1f} on "
            f"{os.cpu_count()} cores)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
