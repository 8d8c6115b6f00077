"""The sweep report: a row per job, each worker's throughput and memory, totals, and the CLI summary.

Lives here: `SweepOutcome`, `build_report`, `summary_lines`. Imports `app.batch.worker`, `nodes.sweep`.
No Qt, no Ray.

Rates are over the sweep's wall time (first job handed out to last result back), so the workers' images per
minute add up to the total; `busy_seconds` is the time a worker spent inside jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.batch.worker import JobResult
from nodes.sweep import SweepAxis


@dataclass
class SweepOutcome:
    """What a backend hands back: every job's result (in job order) and each worker's telemetry."""

    results: list[JobResult]
    workers: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    cancelled: bool = False
    backend: str = "local"
    cluster: str | None = None
    startup_seconds: float = 0.0  # starting workers (Ray start-up, imports), not counted in the rates


def _rates(images: int, tokens: int, seconds: float) -> dict[str, float]:
    return {
        "images_per_min": round(images / seconds * 60.0, 3) if seconds > 0 else 0.0,
        "tokens_per_s": round(tokens / seconds, 3) if seconds > 0 else 0.0,
    }


def _worker_rows(outcome: SweepOutcome) -> list[dict[str, Any]]:
    rows = []
    for worker in outcome.workers:
        mine = [r for r in outcome.results if r.worker == worker["worker"]]
        images, tokens = sum(r.images for r in mine), sum(r.tokens for r in mine)
        rows.append(
            {
                **worker,
                "jobs": len([r for r in mine if r.status != "skipped"]),
                "images": images,
                "tokens": tokens,
                "busy_seconds": round(sum(r.seconds for r in mine), 4),
                **_rates(images, tokens, outcome.wall_seconds),
            }
        )
    return rows


def build_report(
    outcome: SweepOutcome,
    *,
    workflow: str,
    axes: list[SweepAxis],
    zip_axes: bool,
    contact_sheet: dict[str, str] | None = None,
) -> dict[str, Any]:
    results = sorted(outcome.results, key=lambda r: r.index)
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "failed", "cancelled", "skipped")}
    images, tokens = sum(r.images for r in results), sum(r.tokens for r in results)
    return {
        "ok": counts["ok"] == len(results) and not outcome.cancelled,
        "cancelled": outcome.cancelled,
        "workflow": workflow,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "backend": outcome.backend,
        "cluster": outcome.cluster,
        "mode": "zip" if zip_axes else "grid",
        "axes": [{"target": a.target, "values": list(a.values)} for a in axes],
        "counts": counts,
        "jobs": [r.to_json() for r in results],
        "totals": {
            "jobs": len(results),
            "images": images,
            "tokens": tokens,
            "wall_seconds": round(outcome.wall_seconds, 4),
            "startup_seconds": round(outcome.startup_seconds, 4),
            **_rates(images, tokens, outcome.wall_seconds),
        },
        "workers": _worker_rows(outcome),
        "contact_sheet": contact_sheet or {},
    }


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The lines the CLI prints at the end (plain text; the caller adds colour)."""
    c, t = report["counts"], report["totals"]
    lines = [
        f"{t['jobs']} job(s): {c['ok']} ok, {c['failed']} failed, {c['cancelled'] + c['skipped']} cancelled "
        f"in {t['wall_seconds']:.2f} s"
        + (f" (+{t['startup_seconds']:.1f} s starting workers)" if t["startup_seconds"] >= 0.05 else "")
    ]

    def rate(row: dict[str, Any]) -> str:
        parts = []
        if row["images"]:
            parts.append(f"{row['images_per_min']:.1f} images/min")
        if row["tokens"]:
            parts.append(f"{row['tokens_per_s']:.1f} tok/s")
        return ", ".join(parts) or "no images or tokens"

    lines.append(f"total: {rate(t)}")
    for row in report["workers"]:
        peak = row.get("memory", {}).get("process_peak_rss", 0) / 2**20
        loads = ", ".join(f"{k} x{v}" for k, v in sorted(row.get("load_counts", {}).items())) or "none"
        lines.append(
            f"  worker {row['worker']} ({row.get('device', '?')}): {row['jobs']} job(s), {rate(row)}; "
            f"peak RSS {peak:,.0f} MiB; loads: {loads}"
        )
    for job in report["jobs"]:
        if job["status"] == "failed":
            lines.append(f"  job {job['index']} failed: {job['error']}")
    return lines
