"""Peak tracking over nested windows, fed from two threads: the sampler and the compute thread.

Lives here: `PeakTracker`, `Window`. May import: stdlib only.

Per-node and per-use peaks come from our own readings (the sampler at `sample_hz`, plus a reading by the
compute thread at every window boundary), never from resetting the kernel's high-water mark: writing
/proc/self/clear_refs would make `/usr/bin/time -v` and the user's own monitoring under-report.
Thread rule: every field is read and written under `_lock`; `observe` is the only call the sampler makes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(eq=False)
class Window:
    """One open measurement: the reading when it opened and the largest reading seen since."""

    start: int
    peak: int


class PeakTracker:
    """The largest reading since creation (`overall`) and within each open window."""

    def __init__(self, initial: int = 0) -> None:
        self._lock = threading.Lock()
        self._overall = initial
        self._open: list[Window] = []

    def observe(self, value: int) -> None:
        with self._lock:
            if value > self._overall:
                self._overall = value
            for window in self._open:
                if value > window.peak:
                    window.peak = value

    def open(self, value: int) -> Window:
        """Start a window at the reading `value` (also observed)."""
        window = Window(value, value)
        with self._lock:
            self._overall = max(self._overall, value)
            for other in self._open:
                other.peak = max(other.peak, value)
            self._open.append(window)
        return window

    def close(self, window: Window, value: int) -> Window:
        """Observe the closing reading and end the window; returns it (start, peak)."""
        self.observe(value)
        with self._lock:
            if window in self._open:
                self._open.remove(window)
            return Window(window.start, window.peak)

    @property
    def overall(self) -> int:
        with self._lock:
            return self._overall
