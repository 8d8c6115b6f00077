"""Learned working memory: measured peaks persisted as a small JSON file in the data dir.

May import: stdlib, filelock.
Key: (device kind, node type, model key, shape key); the model key is the component's `ComponentSpec.learned_key`
(for loaded models a key of what the files hold, not where: `pipelines.model_keys`). Value: the largest working-memory peak measured for it,
in bytes, and how many runs it is based on. The largest, not the latest: an estimate is used to decide what
to evict, and evicting too little is the failure that costs a run.

Besides each use's peak, a node's whole peak is learned (`node_shape_key`): the most the node's RSS (or device
memory) rose above its start beyond the weights it loaded, keyed by its first use's model and shape. It covers
what no single use window sees: the node's later uses (a Qwen-Image-Edit prompt encodes its pictures with the
VAE after the text encoder, and a plan stops a node at its first use) and the work between them.

Several processes may run at once (a GUI and a headless run, parallel sweeps), so a write is a
read-merge-write under a file lock (`filelock`, next to the file), and the file is replaced atomically
(temp file + fsync + rename): a reader never sees half a file and no process loses another's records.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

FILENAME = "memory_peaks.json"
VERSION = 1
LOCK_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)

Entries = dict[str, dict[str, int]]
NODE_MARK = "node:"


def node_shape_key(shape_key: str) -> str:
    """The shape key a node's whole peak is learned under: its first use's, marked (that use's own figure keeps
    the plain key)."""
    return NODE_MARK + shape_key


def _read(path: Path) -> Entries:
    try:
        data = json.loads(path.read_text())
        if data.get("version") != VERSION:
            return {}
        return {
            str(k): {"working_bytes": int(v["working_bytes"]), "runs": int(v["runs"])}
            for k, v in dict(data["entries"]).items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        # A missing or unreadable file just means nothing learned yet.
        return {}


def _merge(into: Entries, key: str, working_bytes: int, runs: int) -> None:
    old = into.get(key, {"working_bytes": 0, "runs": 0})
    into[key] = {"working_bytes": max(old["working_bytes"], working_bytes), "runs": old["runs"] + runs}


class LearnedPeaks:
    """Read on first use; each new measurement is merged into the file under the lock and read back."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILENAME
        self._lock = FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S)
        self._entries: Entries | None = None

    @staticmethod
    def key(device_kind: str, node_type: str, model_key: str, shape_key: str) -> str:
        return "|".join((device_kind, node_type, model_key, shape_key))

    def _load(self) -> Entries:
        if self._entries is None:
            self._entries = _read(self.path)
        return self._entries

    def get(self, device_kind: str, node_type: str, model_key: str, shape_key: str) -> int | None:
        entry = self._load().get(self.key(device_kind, node_type, model_key, shape_key))
        return entry["working_bytes"] if entry else None

    def record(
        self, device_kind: str, node_type: str, model_key: str, shape_key: str, working_bytes: int
    ) -> None:
        k = self.key(device_kind, node_type, model_key, shape_key)
        _merge(self._load(), k, int(working_bytes), 1)
        # A measurement that can't be stored (read-only data dir, full disk, a stuck lock) must not fail
        # the node it measured: it stays in memory for this process.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock:
                merged = _read(self.path)
                _merge(merged, k, int(working_bytes), 1)
                self._write(merged)
            # What other processes learned meanwhile is ours too; our own maxima stay.
            for key, entry in self._load().items():
                if key not in merged or merged[key]["working_bytes"] < entry["working_bytes"]:
                    merged[key] = dict(entry)
            self._entries = merged
        except (OSError, Timeout) as exc:
            log.warning("could not store learned memory peaks in %s: %s", self.path, exc)

    def _write(self, entries: Entries) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".peaks", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "entries": entries}, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if hasattr(os, "O_DIRECTORY"):  # the rename itself survives a crash only once the folder is synced
            dir_fd = os.open(self.path.parent, os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
