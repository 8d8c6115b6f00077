"""Autosave and crash recovery: the unsaved graph is written to the user data dir every minute; a clean
exit removes it, so finding it at start means the last session ended badly and recovery is offered.

Lives here: `Autosave`. Imports `memory.paths`, `nodes.workflow`. No Qt: the window drives it from a QTimer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memory.paths import user_data_dir
from nodes.workflow import atomic_write_text

INTERVAL_MS = 60_000


class Autosave:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or (user_data_dir() / "autosave")
        self.path = self.folder / "autosave.json"

    def write(self, workflow: dict[str, Any], source: str | None) -> None:
        """Save the current graph along with the file it belongs to (None: never saved)."""
        atomic_write_text(self.path, json.dumps({"source": source, "pid": os.getpid(), "workflow": workflow},
                                                indent=1))

    def pending(self) -> dict[str, Any] | None:
        """What the last session left behind, or None after a clean exit."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("workflow"), dict):
            return None
        if _alive(data.get("pid")):
            return None  # another Nodeloom window is still running and owns it: not a crash
        return data

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def _alive(pid: object) -> bool:
    """True for a running process other than this one."""
    if not isinstance(pid, int) or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
