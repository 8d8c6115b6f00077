"""Learned working memory: measured per-node peaks persisted as a small JSON file in the data dir.

May import: stdlib.
Key: (device kind, node type, model key, shape key). Value: the largest working-memory peak measured for it,
in bytes, and how many runs it is based on. The largest, not the latest: an estimate is used to decide what
to evict, and evicting too little is the failure that costs a run.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

FILENAME = "memory_peaks.json"
log = logging.getLogger(__name__)
VERSION = 1


class LearnedPeaks:
    """Read on first use, written after every new measurement (atomically: temp file + rename)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILENAME
        self._entries: dict[str, dict[str, int]] | None = None

    @staticmethod
    def key(device_kind: str, node_type: str, model_key: str, shape_key: str) -> str:
        return "|".join((device_kind, node_type, model_key, shape_key))

    def _load(self) -> dict[str, dict[str, int]]:
        if self._entries is None:
            try:
                data = json.loads(self.path.read_text())
                self._entries = dict(data["entries"]) if data.get("version") == VERSION else {}
            except (OSError, ValueError, KeyError, TypeError):
                # A missing or unreadable file just means nothing learned yet.
                self._entries = {}
        return self._entries

    def get(self, device_kind: str, node_type: str, model_key: str, shape_key: str) -> int | None:
        entry = self._load().get(self.key(device_kind, node_type, model_key, shape_key))
        return int(entry["working_bytes"]) if entry else None

    def record(
        self, device_kind: str, node_type: str, model_key: str, shape_key: str, working_bytes: int
    ) -> None:
        entries = self._load()
        k = self.key(device_kind, node_type, model_key, shape_key)
        old = entries.get(k, {"working_bytes": 0, "runs": 0})
        entries[k] = {
            "working_bytes": max(int(old["working_bytes"]), int(working_bytes)),
            "runs": old["runs"] + 1,
        }
        self._save(entries)

    def _save(self, entries: dict[str, dict[str, int]]) -> None:
        # A measurement that can't be stored (read-only data dir, full disk) must not fail the node it measured.
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".peaks", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "entries": entries}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("could not store learned memory peaks in %s: %s", self.path, exc)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
