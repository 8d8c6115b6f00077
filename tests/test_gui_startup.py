"""Start-up (issue 29): the window's modules do not import torch (it loads on a thread behind the window), and
a Run pressed while it loads waits in the run queue, then starts by itself."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.gui.startup import Warmup
from tests.gui_support import make_window

pytestmark = pytest.mark.slow  # a subprocess import and a run

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources" / "workflows" / "text_demo.json"


def test_opening_the_window_imports_no_torch() -> None:
    code = (
        "import sys, app.gui.main_window, app.gui; print('torch' in sys.modules, 'diffusers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_a_run_pressed_while_torch_loads_waits_in_the_queue(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    assert window.open_path(TEXT_DEMO, confirm=False)
    loading = Warmup(window)  # as at launch: the imports still running on their thread
    loading.start = lambda: None  # type: ignore[method-assign]
    loading.memory_ready.connect(window._memory_imports_ready)
    window.warmup = loading
    assert window.run_workflow()
    assert not window.runner.running and len(window.queue.jobs) == 1
    assert window.statusBar().currentMessage().startswith("Starting up: ")
    loading.imported = True  # the thread is done: its queued signal arrives
    loading._finish("")
    deadline = time.monotonic() + 60
    while window.last_result is None and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    assert window.last_result is not None and window.last_result.ok, window.last_result
    assert not window.queue.jobs
