"""Start-up off the GUI thread (issue 29): the window opens before torch is imported, stays responsive while it
is, and a Run pressed meanwhile waits in the run queue instead of freezing the window.

Lives here: `Warmup`. Imports Qt; `memory.manager` and `nodes.executor` (torch) on its thread only.

Measured on the shared 2-core machine (benchmarks/startup.py): importing torch for the memory manager took
4-5 s on the GUI thread right after the window appeared (the window was mapped but frozen, and a Run pressed
then waited behind it). `Warmup` imports what the memory manager and the executor need on a plain thread and
then says `memory_ready` (queued to the GUI thread), where building the manager is quick. `launch` also
imports the diffusion libraries behind the window (`app.gui.warm_imports`).
"""

from __future__ import annotations

import importlib
import sys
import threading

from PySide6.QtCore import QObject, Qt, QTimer, Signal

MEMORY_IMPORTS = ("torch", "memory.manager", "nodes.executor")


class Warmup(QObject):
    memory_ready = Signal(
        str
    )  # "" once the imports are in, else the import's error (shown in the status bar)
    _done = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ready = False  # memory_ready was delivered
        self.imported = False  # the imports are done (set on the thread: a run may build the manager now)
        self._thread: threading.Thread | None = None
        self._done.connect(self._finish, Qt.ConnectionType.QueuedConnection)

    def start(self) -> None:
        if self._thread is not None or self.ready:
            return
        if all(name in sys.modules for name in MEMORY_IMPORTS):  # imported already (a second window, tests)
            self.imported = True
            self._thread = threading.current_thread()
            # A child timer, not QTimer.singleShot with a bare lambda: it dies with this object, so a window
            # closed within the 100 ms never gets a signal from a deleted source (seen once in CI).
            timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(lambda: self._finish(""))
            timer.start(100)
            return

        def work() -> None:
            for name in MEMORY_IMPORTS:
                try:
                    importlib.import_module(name)
                except Exception as exc:  # a broken install: the memory manager's own start says so
                    self.imported = True
                    self._done.emit(f"{name}: {type(exc).__name__}: {exc}")
                    return
            self.imported = True
            self._done.emit("")

        self._thread = threading.Thread(target=work, name="nodeloom-warm-memory", daemon=True)
        self._thread.start()

    def _finish(self, error: str) -> None:
        if self.ready:
            return
        self.ready = True
        self.memory_ready.emit(error)
