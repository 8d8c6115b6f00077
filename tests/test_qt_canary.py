"""Canary: PySide6 6.12.0 on CPython 3.11 aborts after a few thousand void Qt calls (none_dealloc).

Small tests pass on that bad pair, so this makes ~20k void calls in a subprocess and checks it survives.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
from PySide6.QtGui import QGuiApplication, QPen
app = QGuiApplication([])
pen = QPen()
for i in range(20000):
    pen.setWidth(i % 7)  # a void call: returns None
print("survived")
"""


def test_twenty_thousand_void_qt_calls_do_not_abort_the_process() -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"PySide6 aborted (exit {proc.returncode}): {proc.stderr[-500:]}"
    assert "survived" in proc.stdout
