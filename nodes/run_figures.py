"""A run's throughput figures, the one definition the CLI report, its summary line and the editor read.

Lives here: `run_figures`, `figures_line`, `VIDEO_SUFFIXES`. Imports the standard library only.

From a run's JSON (`RunResult.to_json()`) and, where given, the memory report's step events:
- a video is a node that reported both `video_frames` and `video_fps` (Save Video does; VAE Decode Video
  reports frames only, so a decode + save graph counts one video);
- `frames` and `video_seconds` sum over those videos (frames / fps each);
- `videos_per_hour` = videos / run seconds x 3600, `frames_per_s` = frames / run seconds (frames of video per
  second of compute);
- `s_per_step` = the mean duration of this run's sampler steps (step events of kind `sampler_step` from the
  nodes that ran in it);
- `images` = picture files written by nodes that made no video, `images_per_min` = images / run seconds x 60.
The run's own `seconds` is the wall time of the run (loading included), as a user waits for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

VIDEO_SUFFIXES = (".mp4", ".webm", ".webp", ".mkv", ".mov", ".gif")
_PICTURES = (".png", ".jpg", ".jpeg")


def run_figures(run: dict[str, Any], steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    seconds = float(run.get("seconds") or 0.0)
    nodes = run.get("nodes", {})
    videos = [
        (float(m["video_frames"]), float(m["video_fps"]))
        for n in nodes.values()
        if n.get("status") == "ran" and "video_frames" in (m := n.get("metrics", {})) and "video_fps" in m
    ]
    video_nodes = {
        nid for nid, n in nodes.items() if {"video_frames", "video_fps"} <= set(n.get("metrics", {}))
    }
    images = sum(
        1
        for nid, n in nodes.items()
        if n.get("status") == "ran" and nid not in video_nodes
        for f in n.get("outputs", [])
        if Path(f).suffix.lower() in _PICTURES
    )
    ran = {nid for nid, n in nodes.items() if n.get("status") == "ran"}
    durations = [
        float(s["seconds"])
        for s in steps or ()
        if s.get("kind") == "sampler_step" and s.get("node_id") in ran
    ]
    frames = sum(f for f, _ in videos)
    figures: dict[str, Any] = {"seconds": round(seconds, 4)}
    if durations:
        figures["s_per_step"] = round(sum(durations) / len(durations), 4)
    if videos:
        figures.update(
            videos=len(videos),
            frames=int(frames),
            video_seconds=round(sum(f / fps for f, fps in videos if fps > 0), 4),
            videos_per_hour=round(len(videos) / seconds * 3600.0, 3) if seconds > 0 else 0.0,
            frames_per_s=round(frames / seconds, 3) if seconds > 0 else 0.0,
        )
    if images:
        figures.update(
            images=images, images_per_min=round(images / seconds * 60.0, 3) if seconds > 0 else 0.0
        )
    return figures


def figures_line(figures: dict[str, Any]) -> str:
    """One line for people: "9 frames (0.56 s of video) · 1234.5 videos/hour · 4.0 frames/s · 0.25 s/step"."""
    parts = []
    if "videos" in figures:
        count = f"{figures['videos']} videos, " if figures["videos"] > 1 else ""
        parts.append(f"{count}{figures['frames']} frames ({figures['video_seconds']:.2f} s of video)")
        parts.append(f"{figures['videos_per_hour']:.1f} videos/hour")
        parts.append(f"{figures['frames_per_s']:.2f} frames/s")
    if "images" in figures:
        parts.append(f"{figures['images']} images, {figures['images_per_min']:.1f} images/min")
    if "s_per_step" in figures:
        parts.append(f"{figures['s_per_step']:.3f} s/step")
    return " · ".join(parts)
