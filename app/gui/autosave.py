"""Autosave and crash recovery: the unsaved graph is written to the user data dir every minute; a clean
exit removes it, so finding it at start means the last session ended badly and recovery is offered.

Each process writes its own `autosave-<pid>.json`, so one window's clean exit never deletes another's
work. At start the newest file whose process is gone is offered; it is first renamed to this process's
own file (claiming it, so two starting windows cannot both recover it). A file that cannot be read is
renamed to `*.broken` rather than dropped.

Lives here: `Autosave`. Imports `memory.paths`, `nodes.workflow`. No Qt: the window drives it from a QTimer.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from memory.paths import user_data_dir
from nodes.workflow import atomic_write_text

INTERVAL_MS = 60_000
# "autosave.json" is the single shared file older versions wrote; it is still recovered.
_NAME = re.compile(r"autosave(?:-(\d+))?\.json")


class Autosave:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or (user_data_dir() / "autosave")
        self.path = self.folder / f"autosave-{os.getpid()}.json"

    def write(self, workflow: dict[str, Any], source: str | None) -> None:
        """Save the current graph along with the file it belongs to (None: never saved)."""
        atomic_write_text(
            self.path, json.dumps({"source": source, "pid": os.getpid(), "workflow": workflow}, indent=1)
        )

    def pending(self) -> dict[str, Any] | None:
        """The newest graph a crashed session left behind (now this process's file), or None."""
        for candidate in self._leftovers():
            match = _NAME.fullmatch(candidate.name)
            if match and match.group(1) and _alive(int(match.group(1))):
                continue  # a running window's own file, unreadable or not: leave it to that window
            data = _read(candidate)
            if data is None:
                _set_aside(candidate)
                continue
            if _alive(data.get("pid")):
                continue  # the old shared file, owned by a window that is still running: not a crash
            if self._claim(candidate, data):
                return data
        return None

    def set_aside(self) -> Path | None:
        """Keep a recovered graph that failed to load as `*.broken` (clear() would delete it)."""
        return _set_aside(self.path) if self.path.exists() else None

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def _leftovers(self) -> list[Path]:
        """Other processes' autosave files, newest first."""
        found: list[tuple[float, Path]] = []
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return []
        for path in entries:
            if path == self.path or not _NAME.fullmatch(path.name):
                continue
            try:
                found.append((path.stat().st_mtime, path))
            except OSError:
                continue  # removed meanwhile (its window exited)
        return [path for _mtime, path in sorted(found, key=lambda item: item[0], reverse=True)]

    def _claim(self, candidate: Path, data: dict[str, Any]) -> bool:
        """Make a dead session's file this process's own: declining then deletes it, and a running window
        never sees it as orphaned."""
        try:
            stat = candidate.stat()
            os.replace(candidate, self.path)  # atomic: if another window got there first, this fails
        except OSError:
            return False
        # Record the new owner, but keep the time so the offer says when the work was really saved.
        atomic_write_text(self.path, json.dumps(dict(data, pid=os.getpid()), indent=1))
        os.utime(self.path, (stat.st_atime, stat.st_mtime))
        return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("workflow"), dict):
        return None
    return data


def _set_aside(path: Path) -> Path | None:
    """Rename to a free `<name>.broken[.N]` so the work can still be rescued by hand."""
    target = path.with_name(path.name + ".broken")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.broken.{n}")
        n += 1
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target


def _alive(pid: object) -> bool:
    """True for a running process other than this one."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # e.g. a pid beyond the platform's range
        return False
    return True
