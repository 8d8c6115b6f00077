"""Run a planned sweep end to end, for the CLI and the GUI alike: jobs, outputs, contact sheet, report.

Lives here: `SweepPlan`, `prepare_sweep`, `execute_sweep`, `write_outputs`. Imports `app.batch.*`, `nodes`.
No Qt, no rich; Ray only through the `RayCluster` the caller passes in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.batch.contact_sheet import write_contact_sheet
from app.batch.local import run_local
from app.batch.report import SweepOutcome, build_report
from app.batch.worker import JobResult, WorkerConfig
from nodes.context import CancelToken
from nodes.files import atomic_write_bytes
from nodes.png import check_prefix
from nodes.registry import NodeRegistry
from nodes.sweep import SweepAxis, SweepError, SweepJob, load_key, parse_axis, plan_jobs
from nodes.workflow import Workflow, atomic_write_text


@dataclass
class SweepPlan:
    workflow: Workflow
    axes: list[SweepAxis]
    jobs: list[SweepJob]
    keys: dict[int, str]  # job index -> load key
    zip_axes: bool


def prepare_sweep(
    wf: Workflow, items: list[str], registry: NodeRegistry, *, zip_axes: bool = False
) -> SweepPlan:
    """Parse the --sweep flags against the workflow and plan the jobs; raises `SweepError`."""
    axes = [parse_axis(item, wf, registry) for item in items]
    if zip_axes and not axes:
        raise SweepError("--zip pairs --sweep flags; give at least one --sweep")
    jobs = plan_jobs(axes, zip_axes=zip_axes) or [SweepJob(0, {})]
    return SweepPlan(wf, axes, jobs, {j.index: load_key(wf, registry, j) for j in jobs}, zip_axes)


def _unique(path: Path) -> Path:
    n, candidate = 1, path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return candidate


def write_outputs(result: JobResult, out_dir: Path) -> None:
    """Write the files a remote worker sent back into `out_dir` (names only: never a path out of it)."""
    if not result.files:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in result.files.items():
        base = Path(name).name
        check_prefix(base)
        path = _unique(out_dir / base)
        atomic_write_bytes(path, data)  # a full disk or a kill leaves no torn picture under the name
        written.append(str(path))
    result.files = {}
    result.outputs = written


def execute_sweep(
    plan: SweepPlan,
    config: WorkerConfig,
    out_dir: Path,
    *,
    registry: NodeRegistry | None = None,
    cluster: Any = None,
    cancel: CancelToken | None = None,
    on_result: Callable[[JobResult], None] | None = None,
    report_path: Path | None = None,
) -> dict[str, Any]:
    """Run every job (locally, or on `cluster`), keep the outputs, write the contact sheet and the report.

    `on_result` sees each job as it ends, its files already in `out_dir`. A KeyboardInterrupt (a second
    Ctrl+C) still writes the report of what finished, then propagates.
    """
    cancel = cancel or CancelToken()
    finished: list[JobResult] = []

    def collect(result: JobResult) -> None:
        write_outputs(result, out_dir)
        finished.append(result)
        if on_result is not None:
            on_result(result)

    outcome: SweepOutcome | None = None
    try:
        if cluster is not None:
            outcome = cluster.run(plan, config, cancel=cancel, on_result=collect)
        else:
            outcome = run_local(
                plan.workflow,
                plan.jobs,
                plan.keys,
                config,
                registry=registry,
                cancel=cancel,
                on_result=collect,
            )
    finally:
        if outcome is None:  # interrupted: no worker telemetry, but the rows of what finished
            outcome = SweepOutcome(finished, cancelled=True, backend="ray" if cluster else "local")
        out_dir.mkdir(parents=True, exist_ok=True)
        sheet = write_contact_sheet(
            outcome.results, plan.axes, out_dir, title=f"{plan.workflow.source}: sweep"
        )
        report = build_report(
            outcome,
            workflow=plan.workflow.source,
            axes=plan.axes,
            zip_axes=plan.zip_axes,
            contact_sheet=sheet,
        )
        report["report"] = str(report_path or out_dir / "sweep.json")
        atomic_write_text(Path(report["report"]), json.dumps(report, indent=2, default=str) + "\n")
    return report
