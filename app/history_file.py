"""The output history file the editor shows: one JSON line per run, next to the pictures.

Lives here: `HISTORY_FILE`, `POSTERS_DIR`, `MAX_ENTRIES`, `HistoryEntry`, `read_history`, `append_history`,
`seeds_of`, `video_poster`, `with_figures`. Imports the standard library, `nodes.run_figures`, `nodes.video_read`
(inside `video_poster`) and `nodes.registry`/`nodes.workflow` (types only); no Qt, so the server
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
POSTERS_DIR = (
    ".nodeloom-posters"  # next to the history file: posters are the history's, not the run's outputs
)
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
    # A video's poster frame (a PNG): under POSTERS_DIR for a video file, a PNG-frames video's first frame.
    poster: str = ""

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


def with_figures(report: dict[str, Any], steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A run's JSON with its throughput figures (`nodes.run_figures`, the CLI report's own definition)."""
    from nodes.run_figures import run_figures

    return {**report, "figures": run_figures(report, steps)}


def video_poster(out_dir: Path, report: dict[str, Any]) -> str:
    """The poster frame of the first video a run saved, or "" when it saved none: for PNG frames the first
    frame itself; for a video file its first frame, written as a PNG under `<out_dir>/POSTERS_DIR`."""
    from nodes.run_figures import VIDEO_SUFFIXES

    for node in report.get("nodes", {}).values():
        metrics = node.get("metrics", {})
        files = [Path(f) for f in node.get("outputs", [])]
        if node.get("status") != "ran" or "video_frames" not in metrics or not files:
            continue
        if files[0].suffix.lower() == ".png":
            return str(files[0])
        if files[0].suffix.lower() in VIDEO_SUFFIXES and files[0].is_file():
            return _first_frame_png(out_dir, files[0])
    return ""


def _first_frame_png(out_dir: Path, video: Path) -> str:
    from PIL import Image

    from nodes.video_read import VideoFileError, read_frames

    try:
        frames, _ = read_frames(video, 0, 1, 256)  # a thumbnail: at most 256 px a side
    except (VideoFileError, OSError):
        return ""
    if not frames:
        return ""
    folder = Path(out_dir) / POSTERS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{video.stem}{video.suffix.replace('.', '_')}.png"
    Image.fromarray(frames[0]).save(path)
    return str(path)
