"""The output history file the editor shows: one JSON line per run, next to the pictures.

Lives here: `HISTORY_FILE`, `MAX_ENTRIES`, `HistoryEntry`, `read_history`, `append_history`, `seeds_of`.
Imports the standard library and `nodes.registry`/`nodes.workflow` (types only); no Qt, so the server
(app/server) writes the same file the editor's history panel (app/gui/history.py) reads.

Stored as JSON lines (`<output folder>/.nodeloom-history.jsonl`): one line per run, appended, so a crash
loses at most the run in flight and the history moves with its pictures.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nodes.registry import NodeRegistry
    from nodes.workflow import Workflow

HISTORY_FILE = ".nodeloom-history.jsonl"
MAX_ENTRIES = 500


@dataclass
class HistoryEntry:
    time: float
    label: str
    workflow: dict[str, Any]
    seeds: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def cancelled(self) -> bool:
        return bool(self.report.get("cancelled"))

    def caption(self) -> str:
        """What the list shows before the output itself: workflow, seed(s), time, and a cancelled mark."""
        stamp = time.strftime("%d %b %H:%M", time.localtime(self.time))
        # A run's label is "name (node.seed=N, …)": the seeds are shown once, from `seeds`, so keep the name.
        parts = [re.sub(r" \([^()]*=[^()]*\)$", "", self.label) if self.seeds else self.label]
        if self.seeds:
            parts.append("seed " + ", ".join(str(v) for v in self.seeds.values()))
        parts.append(stamp)
        return ("Cancelled · " if self.cancelled else "") + " · ".join(parts)


def seeds_of(wf: Workflow, registry: NodeRegistry) -> dict[str, int]:
    """`{"node.param": seed}` for every seed parameter the workflow sets (the history shows them)."""
    return {
        f"{nid}.{p.name}": wf.nodes[nid].params[p.name]
        for nid in wf.nodes
        if (spec := registry.get(wf.nodes[nid].type)) is not None
        for p in spec.params
        if p.kind.name == "seed" and isinstance(wf.nodes[nid].params.get(p.name), int)
    }


def read_history(out_dir: Path) -> list[HistoryEntry]:
    """Entries oldest first; unreadable lines (a crash mid-write) are skipped."""
    path = Path(out_dir) / HISTORY_FILE
    entries = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines()[-MAX_ENTRIES:]:
            try:
                entries.append(HistoryEntry(**json.loads(line)))
            except (ValueError, TypeError):
                continue
    return entries


def append_history(out_dir: Path, entry: HistoryEntry) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / HISTORY_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry), default=str) + "\n")
